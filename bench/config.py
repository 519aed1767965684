"""How big a run is. `--quick` runs every scenario with fewer samples and lower concurrency; the
full run is the one the docs' record is made of (`--record`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    quick: bool
    repeats: int  # samples per case, where cases are sequential
    concurrency: tuple[int, ...]
    min_requests: int  # per concurrency level (at least the level itself)
    max_tokens: int  # per answer in the latency sweep

    @classmethod
    def make(cls, quick: bool) -> Config:
        if quick:
            return cls(quick, repeats=2, concurrency=(1, 4), min_requests=2, max_tokens=8)
        return cls(quick, repeats=8, concurrency=(1, 4, 16, 64), min_requests=8, max_tokens=32)
