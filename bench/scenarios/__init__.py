"""One module per scenario; each has `run(target, config) -> list[Row]`."""
