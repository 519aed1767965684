"""A start to ready: this server warm (the model converted, the kernels compiled) and cold (a new
cache folder), beside SGLang's own HTTP server on the same model (`b3os-infer sglang-server`),
warm; and where a warm start's seconds go: the steps of this server's start log, and what each of
the three processes imports, timed alone in a fresh interpreter."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bench.report import Row
from bench.run import Run
from bench.stats import percentile
from bench.target import paused, started

NAME = "startup"
NOTE = (
    "Seconds from the command to ready (/readyz; SGLang's own server: /health_generate), the "
    "other servers of the run stopped meanwhile; median of the warm starts. Steps: between the "
    "start log's lines (on a CPU the forkserver, started before the model is read, imports "
    "SGLang's scheduler and detokenizer meanwhile; SGLang's Engine() forks them from it, they "
    "load the model and size the memory pool). Imports: wall and CPU seconds of a fresh "
    "interpreter importing what that process imports, alone."
)
# The start log's lines (server.serve, cpu_compat, engine, state) that end each step, in order.
STEPS = (
    ("the node's imports and app", r"server\.serve: listening on"),
    ("the CPU kernels (compiled or loaded)", r"cpu_compat: CPU kernels"),
    ("the forkserver started, torch's import", r"cpu_compat: CPU (has|without) AMX"),
    ("model, tokenizer, chat format, SGLang's import and plugins", r"engine: starting SGLang"),
    ("SGLang's Engine(): its processes, the model, the pool", r"engine: SGLang ready"),
    ("to ready", r"server\.state: serving .* ready in"),
)
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
PREPARED = (
    "from server.engines.sglang.cpu_compat import prepare_cpu_runtime; prepare_cpu_runtime(); "
    "from server.torch_compat import ensure_torchvision_loadable; ensure_torchvision_loadable(); "
)
IMPORTS = {  # each process's own modules, on the CPU path this machine takes
    "front (this server, SGLang's engine)": "import server.app, sglang.srt.entrypoints.engine",
    "forkserver (the scheduler's and detokenizer's, once)": "import server.engines.sglang.preload",
    "SGLang's own scheduler": "import sglang.srt.managers.scheduler",
    "SGLang's own detokenizer": "import sglang.srt.managers.detokenizer_manager",
}


@dataclass(frozen=True)
class _Start:
    began: float  # the command's wall-clock time, as the log's stamps are
    ready: float  # seconds from the command to ready
    log: Path


def run(run: Run) -> list[Row]:
    if not run.local:
        return []  # a server started elsewhere: its start is not this run's to measure
    warm_starts = 1 if run.config.quick else 3
    rows: list[Row] = []
    with paused([target for target in (run.ours, run.compare) if target is not None]):
        warm = [_start(run, f"warm-{n}", ()) for n in range(warm_starts)]
        rows.append(_row("this server, warm", warm))
        rows += [
            Row(NAME, f"warm step: {step}", {"s": percentile(seconds, 50)})
            for step, seconds in _steps(warm).items()
        ]
        if not run.config.quick:
            with tempfile.TemporaryDirectory(prefix="bench-cold-") as cache:
                cold = [_start(run, "cold", ("--cache-dir", cache))]
            rows.append(_row("this server, cold (model converted, kernels compiled)", cold))
        own = [_start(run, f"sglang-{n}", (), command="sglang-server") for n in range(warm_starts)]
        rows.append(_row("SGLang's own server, warm", own))
        rows += [_imports(process, modules) for process, modules in IMPORTS.items()]
    return rows


def _start(run: Run, name: str, extra: tuple[str, ...], command: str = "serve") -> _Start:
    log = run.folder / f"startup-{name}.log"
    began = time.time()
    with started(name, log, *run.server_args, *extra, command=command):
        ready = time.time() - began
    return _Start(began, ready, log)


def _row(case: str, starts: list[_Start]) -> Row:
    readies = [start.ready for start in starts]
    return Row(NAME, case, {"n": len(readies), "ready s": percentile(readies, 50)})


def _steps(starts: list[_Start]) -> dict[str, list[float]]:
    """Each step's seconds in each start whose log has its line (a GPU start has no CPU steps:
    the next line found takes their time)."""
    steps: dict[str, list[float]] = {}
    for start in starts:
        lines = start.log.read_text(errors="replace").splitlines()
        last = start.began
        for step, pattern in STEPS:
            at = _when(lines, pattern)
            if at is not None:
                steps.setdefault(step, []).append(at - last)
                last = at
    return steps


def _when(lines: list[str], pattern: str) -> float | None:
    for line in lines:
        stamp = STAMP.match(line)
        if stamp and re.search(pattern, line):
            return datetime.strptime(stamp[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


def _imports(process: str, modules: str) -> Row:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", PREPARED + modules], check=True, env=os.environ, timeout=600
    )
    wall = time.monotonic() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Row(NAME, f"imports: {process}", {"s": wall, "cpu s": cpu})
