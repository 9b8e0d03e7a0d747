"""archiver's settings, one model per concern (the data dir, the runner, Redis, launchers,
the crawl address policy, storage, replay). archiver/conf.py composes them into the one
`Settings` every caller reads, and reads the ARCHIVER_* variables into it."""
