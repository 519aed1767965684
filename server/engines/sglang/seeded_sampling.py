"""Seeded sampling with min_p. SGLang 0.5.23's seeded sampler (its deterministic mode, which
`seed` rests on) asserts that no request of the batch uses min_p, and the assertion kills the
scheduler. Its Gumbel-max draw picks among unnormalized weights correctly, so min_p needs no
renormalization: this filters min_p first (each token below min_p times its row's most likely
one is dropped, as SGLang's unseeded path does), then calls SGLang's sampler without it. The
smallest tokens go, at the tail of the sorted order, so top-k and top-p see the same ranks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

TARGET = "sglang.srt.layers.sampler.top_k_top_p_min_p_sampling_from_probs_torch"


def min_p_first(original: Callable[..., Any]) -> Callable[..., Any]:
    def sample(
        probs: torch.Tensor,
        top_ks: torch.Tensor,
        top_ps: torch.Tensor,
        min_ps: torch.Tensor,
        need_min_p_sampling: bool,
        sampling_seed: torch.Tensor | None,
        positions: torch.Tensor,
        **options: Any,
    ) -> Any:
        if need_min_p_sampling and sampling_seed is not None:
            thresholds = probs.max(dim=-1, keepdim=True).values * min_ps.view(-1, 1)
            probs = probs.masked_fill(probs < thresholds, 0.0)
            need_min_p_sampling = False
        return original(
            probs, top_ks, top_ps, min_ps, need_min_p_sampling, sampling_seed, positions, **options
        )

    return sample
