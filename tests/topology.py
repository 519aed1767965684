"""sglang-router in front of two SGLang workers on the embedded model, run as docs/deploy.md's
scale-out section runs them: real processes on loopback ports, started together once per test
session (about a minute), each worker with a small KV cache and a 4,096-token window (the model's
own is 32,768, so a front that guessed from the model would be caught)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.server_process import STARTUP_TIMEOUT_S, ServerProcess, free_port

WORKER_CONTEXT = 4096
WORKER_ARGS = ("--context-length", str(WORKER_CONTEXT), "--max-total-tokens", "8192")
# One compute thread each: two workers of two threads on two cores spin against each other
# (OpenMP's busy waits), several times slower than one thread each.
WORKER_ENV = {"OMP_NUM_THREADS": "1"}
# docs/deploy.md's router flags (see "Across machines" there for why each).
ROUTER_FLAGS = (
    "--policy", "cache_aware",
    "--health-check-interval-secs", "5",
    "--health-check-timeout-secs", "30",
    "--health-failure-threshold", "2",
    "--health-success-threshold", "1",
    "--retry-max-retries", "1",
    "--cb-failure-threshold", "2",
    "--cb-timeout-duration-secs", "5",
    "--worker-startup-check-interval", "1",
)  # fmt: skip


@dataclass
class RouterTopology:
    router: ServerProcess
    workers: tuple[ServerProcess, ...]

    @property
    def url(self) -> str:
        return self.router.origin

    @property
    def processes(self) -> tuple[ServerProcess, ...]:
        return (*self.workers, self.router)


def worker(folder: Path, name: str, *model_args: str) -> ServerProcess:
    return ServerProcess(
        folder / f"{name}.log",
        *WORKER_ARGS,
        *model_args,
        command="sglang-server",
        env=WORKER_ENV,
    )


def router(folder: Path, workers: tuple[ServerProcess, ...]) -> ServerProcess:
    return ServerProcess(
        folder / "router.log",
        "--host", "127.0.0.1",
        "--worker-urls", *(w.origin for w in workers),
        *ROUTER_FLAGS,
        "--prometheus-port", str(free_port()),
        "--shutdown-grace-period-secs", "5",
        "--log-level", "warn",
        command="sglang-router",
    )  # fmt: skip


def topology_of(folder: Path, *model_args: str) -> RouterTopology:
    """The router and its two workers, their logs in `folder`; not started."""
    workers = (worker(folder, "worker-a", *model_args), worker(folder, "worker-b", *model_args))
    return RouterTopology(router(folder, workers), workers)


def wait_started(topology: RouterTopology) -> RouterTopology:
    """Once its processes are started (together: the router waits for its workers), until the
    router holds both workers healthy; an error with the three logs' tails if they do not get
    there."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S  # for the three together
    try:
        for process in topology.workers:
            process.wait_for("/health_generate", deadline=deadline)
        topology.router.wait_for("/readiness", deadline=deadline)
        wait_until_healthy(topology, deadline)
    except (RuntimeError, AssertionError) as error:
        logs = "\n".join(
            f"--- {process.log_path.name} ---\n{process.log_tail(40)}"
            for process in topology.processes
        )
        raise RuntimeError(f"the router topology did not start: {error}\n{logs}") from None
    return topology


def busy(runtime: ServerProcess) -> int:
    """Requests an SGLang server itself runs or queues, from its live load report."""
    loads = httpx.get(f"{runtime.origin}/v1/loads", params={"include": "core"}, timeout=10)
    reports = loads.json()["loads"]
    return sum(load["num_running_reqs"] + load["num_waiting_reqs"] for load in reports)


def healthy_workers(topology: RouterTopology) -> dict[str, bool]:
    """The router's view of its workers: URL -> healthy."""
    listed = httpx.get(f"{topology.url}/workers", timeout=10).json()["workers"]
    return {worker["url"]: worker["is_healthy"] for worker in listed}


def wait_until_healthy(topology: RouterTopology, deadline: float | None = None) -> None:
    """Until the router lists every worker, each healthy (for two minutes at most, or until
    `deadline` in monotonic seconds)."""
    expected = {worker.origin for worker in topology.workers}
    deadline = time.monotonic() + 120.0 if deadline is None else deadline
    while time.monotonic() < deadline:
        try:
            seen = healthy_workers(topology)
        except httpx.TransportError:
            seen = {}
        if set(seen) == expected and all(seen.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"the router does not hold every worker healthy: {seen}")


def take_out(topology: RouterTopology, worker: ServerProcess) -> None:
    """The router stops using `worker` (its API's DELETE /workers/{id}); the process runs on."""
    listed = httpx.get(f"{topology.url}/workers", timeout=10).json()["workers"]
    [worker_id] = [entry["id"] for entry in listed if entry["url"] == worker.origin]
    removed = httpx.delete(f"{topology.url}/workers/{worker_id}", timeout=30)
    assert removed.status_code == 202, removed.text
    deadline = time.monotonic() + 30.0
    while worker.origin in healthy_workers(topology):
        assert time.monotonic() < deadline, "the router still lists the worker taken out"
        time.sleep(0.2)


def put_back(topology: RouterTopology, worker: ServerProcess) -> None:
    """`worker` added to the router again (POST /workers); wait_until_healthy to use it."""
    added = httpx.post(f"{topology.url}/workers", json={"url": worker.origin}, timeout=30)
    assert added.status_code == 202, added.text
