"""How big a run is: `--quick` for a reduced pass of every scenario."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    repeats: int  # samples per case
    quick: bool

    @classmethod
    def make(cls, quick: bool) -> Config:
        return cls(repeats=3 if quick else 10, quick=quick)
