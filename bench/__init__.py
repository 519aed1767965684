"""The bench suite: time to first token, Server-Timing phases and throughput, measured through
the server's HTTP API (`python -m bench --help`). Results go to bench/results/ (not in git)."""
