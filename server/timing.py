"""Per-request phase timing, reported in `Server-Timing`, the `b3os.timing` body extension and
(later) the request log: milliseconds since the request head was read."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class Timing:
    started: float = field(default_factory=time.perf_counter)
    phases: dict[str, float] = field(default_factory=dict)  # name -> milliseconds, in order

    def since_start(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    def record(self, name: str, since: float) -> None:
        """Adds a phase that began at `since` (a perf_counter reading) and ends now."""
        self.phases[name] = (time.perf_counter() - since) * 1000

    def mark(self, name: str) -> None:
        """Adds a phase that began with the request and ends now (`ttft`, `total`)."""
        self.phases[name] = self.since_start()

    def header(self) -> str:
        """The W3C Server-Timing value: `template;dur=0.412, ttft;dur=118.203`."""
        return ", ".join(f"{name};dur={ms:.3f}" for name, ms in self.phases.items())

    def ms(self, name: str) -> float | None:
        value = self.phases.get(name)
        return None if value is None else round(value, 3)
