"""python -m bench.gpu_check --model MODEL [--out DIR] [--budget-s 1200] [--mem-fraction F]

The GPU check, in one run of bounded time, on a machine with a GPU and SGLang installed:
1. preflight: the GPU, torch, and the SGLang version this project pins (stops here otherwise);
2. the e2e suite (tests/api) with its servers on MODEL on the GPU, both engines;
3. the quick bench against a server on MODEL, side by side with SGLang's own server on it.
Each step gets its share of the budget and is stopped when it runs out; everything it printed,
the e2e results (JUnit XML) and the bench tables land in a new folder under --out, with
summary.json saying what passed. Exit status 0 only when every step passed."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from server.engines.sglang.pins import SGLANG as PINNED_SGLANG

E2E_SHARE = 0.6  # of the budget; the bench gets the rest
# Modules that need the embedded CPU model or a scripted engine, not the model under check.
E2E_IGNORED = ("tests/api/test_configured_server.py", "tests/api/test_stream_failures.py")


@dataclass
class Step:
    name: str
    status: str  # passed, failed, timed out, skipped
    seconds: float
    detail: str = ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.gpu_check", description=__doc__.split("\n\n")[1]
    )
    parser.add_argument("--model", required=True, help="HF model folder or id for SGLang")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="results root")
    parser.add_argument("--budget-s", type=float, default=1200.0, help="whole run, at most")
    parser.add_argument(
        "--mem-fraction",
        type=float,
        default=0.4,
        help="SGLang's --mem-fraction-static for each server (two share the GPU in the bench)",
    )
    args = parser.parse_args(argv)
    folder = args.out / time.strftime("gpu-check-%Y%m%d-%H%M%S")
    folder.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget_s
    served = f"check/{Path(args.model).name}"
    model_args = [
        "--model",
        args.model,
        "--served-model-name",
        served,
        "--device",
        "cuda",
        "--mem-fraction-static",
        str(args.mem_fraction),
    ]
    environment, problem = preflight()
    (folder / "environment.json").write_text(json.dumps(environment, indent=2))
    steps = [Step("preflight", "failed" if problem else "passed", 0.0, problem or "")]
    if problem is None:
        e2e_budget = (deadline - time.monotonic()) * E2E_SHARE
        steps.append(e2e(folder, model_args, served, e2e_budget))
        steps.append(bench(folder, model_args, deadline - time.monotonic()))
    summary = {"model": args.model, "environment": environment, "steps": [asdict(s) for s in steps]}
    (folder / "summary.json").write_text(json.dumps(summary, indent=2))
    for step in steps:
        print(f"{step.name:>10}: {step.status} in {step.seconds:.0f} s {step.detail}".rstrip())
    print(f"results in {folder}")
    return 0 if all(step.status == "passed" for step in steps) else 1


def preflight() -> tuple[dict[str, Any], str | None]:
    """What this machine has, and why the check cannot run here (None: it can)."""
    environment: dict[str, Any] = {"machine": platform.platform(), "python": sys.version}
    smi = shutil.which("nvidia-smi")
    if smi:
        query = "--query-gpu=name,driver_version,memory.total"
        result = subprocess.run([smi, query, "--format=csv,noheader"], capture_output=True)
        environment["gpus"] = result.stdout.decode().strip().splitlines()
    try:
        import torch
    except ImportError:
        return environment, "torch is not installed"
    environment["torch"] = torch.__version__
    environment["cuda"] = torch.version.cuda
    if not torch.cuda.is_available():
        return environment, "torch sees no GPU"
    try:
        import sglang
    except ImportError as exc:
        return environment, f"SGLang does not import: {exc}"
    environment["sglang"] = sglang.__version__
    if sglang.__version__ != PINNED_SGLANG:
        return environment, f"SGLang {sglang.__version__} is installed; this project pins " + (
            PINNED_SGLANG
        )
    return environment, None


def e2e(folder: Path, model_args: list[str], served: str, budget_s: float) -> Step:
    command = [
        sys.executable,
        "-m",
        "pytest",
        "tests/api",
        *(f"--ignore={path}" for path in E2E_IGNORED),
        f"--junitxml={folder / 'e2e.xml'}",
        "-q",
    ]
    env = {
        **os.environ,
        "B3OS_TEST_MODEL_ARGS": shlex.join(model_args),
        "B3OS_TEST_SERVED_MODEL": served,
    }
    return timed("e2e", command, folder / "e2e.log", budget_s, env)


def bench(folder: Path, model_args: list[str], budget_s: float) -> Step:
    command = [
        sys.executable,
        "-m",
        "bench",
        "--quick",
        "--compare-sglang",
        "--server-args",
        shlex.join(model_args),
        "--out",
        str(folder / "bench"),
    ]
    return timed("bench", command, folder / "bench.log", budget_s, dict(os.environ))


def timed(name: str, command: list[str], log: Path, budget_s: float, env: dict[str, str]) -> Step:
    """Runs `command` in its own process group, output to `log`, stopped at the budget."""
    if budget_s < 60:
        return Step(name, "skipped", 0.0, f"{budget_s:.0f} s of the budget left")
    print(f"{name}: {shlex.join(command)} (up to {budget_s:.0f} s, log {log})", file=sys.stderr)
    started = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            code = process.wait(timeout=budget_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            return Step(name, "timed out", time.monotonic() - started, f"see {log}")
    status = "passed" if code == 0 else "failed"
    detail = "" if code == 0 else f"exit {code}; see {log}"
    return Step(name, status, time.monotonic() - started, detail)


if __name__ == "__main__":
    sys.exit(main())
