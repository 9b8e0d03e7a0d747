"""The runner's one-pass steps: each is `step(rt, now) -> found work`."""
