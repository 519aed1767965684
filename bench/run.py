"""What every scenario gets: the run's size, its folder, the servers to measure, and the machine
the run measured."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.config import Config
from bench.machine import Machine
from bench.target import Target


@dataclass(frozen=True)
class Run:
    config: Config
    folder: Path
    ours: Target
    compare: Target | None = None  # another server measured side by side
    local: bool = True  # ours was started by this run, on this machine
    server_args: tuple[str, ...] = ()  # what ours was started with (--server-args)
    machine: Machine | None = None  # measured once, at the run's start (its record's header)
