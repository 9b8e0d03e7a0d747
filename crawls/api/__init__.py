"""archiver's HTTP JSON API, /api/v1/: what the CLI does, for programs (docs/api.md)."""
