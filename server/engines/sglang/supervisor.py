"""Watching the in-process SGLang engine's subprocesses (its scheduler and detokenizer).

SGLang's scheduler dies for good on any assertion a request can reach, and a SIGKILLed one takes
no request down with it: the requests in flight wait on it forever. SGLang's own answer is to
SIGQUIT this process, whose handler then kills the whole server. Here the subprocesses are polled
instead (and SIGQUIT only makes the next poll come at once), so the engine can end the requests
in flight with an error and start a new runtime in this same process."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
from collections.abc import Awaitable, Callable, Iterator
from multiprocessing.process import BaseProcess
from typing import Any

POLL_S = 0.5


def children() -> set[BaseProcess]:
    return set(multiprocessing.active_children())


@contextlib.contextmanager
def no_signal_handlers(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """SGLang's TokenizerManager adds SIGTERM (drain) and SIGQUIT (kill the process tree)
    handlers to the loop it binds to: this server has its own."""

    def refused(sig: int, callback: Callable[..., Any], *args: Any) -> None:
        del sig, callback, args

    loop.add_signal_handler = refused  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        del loop.add_signal_handler


@contextlib.contextmanager
def quits_ignored(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """While a runtime starts: a scheduler that fails to start SIGQUITs this process, whose
    default action is to dump core; Engine() raises on that scheduler's death anyway."""
    with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):  # main thread
        loop.add_signal_handler(signal.SIGQUIT, lambda: None)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGQUIT)


def forget_runtime_metrics(multiproc_dir_was_set: bool) -> None:
    """What a dead runtime's metrics leave behind, dropped so that a new runtime can set up its
    own: its collectors in prometheus_client's global registry (this server's metrics have a
    registry of their own), and the PROMETHEUS_MULTIPROC_DIR SGLang made for them unless the
    operator set it (SGLang would make the next one inside it, then delete both)."""
    from prometheus_client import REGISTRY

    if not multiproc_dir_was_set:
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    names = REGISTRY._collector_to_names  # the registry's one listing of its collectors
    for collector, found in list(names.items()):
        if any(name.startswith("sglang:") for name in found):
            REGISTRY.unregister(collector)


class Supervisor:
    """Calls `on_death` once one of `processes` has exited, then stops watching."""

    def __init__(
        self,
        processes: set[BaseProcess],
        on_death: Callable[[str], Awaitable[None]],
    ) -> None:
        self._processes = processes
        self._on_death = on_death
        self._poll_now = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):  # main thread
            loop.add_signal_handler(signal.SIGQUIT, self._poll_now.set)
        self._task = loop.create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def dead(self) -> str | None:
        """How the first exited subprocess ended, or None while all run."""
        for process in sorted(self._processes, key=lambda p: p.name):
            if not process.is_alive():
                return f"{process.name} (pid {process.pid}) exited with {process.exitcode}"
        return None

    async def _watch(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_S):
                    await self._poll_now.wait()
            self._poll_now.clear()
            how = self.dead()
            if how is not None:
                await self._on_death(how)
                return
