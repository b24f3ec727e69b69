"""One-off investigations of docs/research-log.md, kept runnable (``python -m benchmarks.archive.frontier``); the user
docs do not cite them."""
