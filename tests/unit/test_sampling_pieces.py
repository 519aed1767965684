"""The pieces that make sampling parameters and logprobs work on SGLang: the seeded sampler's
hash on a CPU, min_p with a seed, and logprobs read from SGLang's outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from server.canonical import Sampling
from server.engines.base import EngineFinish, EngineRequest, StopKind
from server.engines.sglang.outputs import logprobs_of
from server.engines.sglang.seeded_sampling import min_p_first

STAND_IN = Path(__file__).resolve().parents[2] / "server/engines/sglang/stand_in"
REQUEST = EngineRequest("req_" + "0" * 26, [1], Sampling(max_tokens=4, stop=("\n\n",)))


def murmur_reference(seed: int, position: int, column: int) -> int:
    """MurmurHash3 x86_32 of the 16 bytes (seed low, seed high, position, column), seed 0."""
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    h = 0
    seed &= (1 << 64) - 1
    for k in (seed & mask, seed >> 32, position & mask, column & mask):
        k = rotl((k * 0xCC9E2D51) & mask, 15)
        h = rotl(h ^ ((k * 0x1B873593) & mask), 13)
        h = (h * 5 + 0xE6546B64) & mask
    h ^= 16
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & mask
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & mask
    return h ^ (h >> 16)


def test_the_stand_in_hash_is_murmur3() -> None:
    sys.path.insert(0, str(STAND_IN))
    try:
        import sgl_kernel  # noqa: F401  (registers torch.ops.sgl_kernel.murmur_hash32_cpu)
    finally:
        sys.path.remove(str(STAND_IN))
    seeds = torch.tensor([0, 42, -1, 2**62 + 12345], dtype=torch.int64)
    positions = torch.tensor([0, 7, 100_000, 2**31 - 1])
    columns = torch.arange(0, 49152, 4093)
    hashed = torch.ops.sgl_kernel.murmur_hash32_cpu.default(
        seeds.to(torch.uint64), positions, columns
    )
    assert hashed.dtype == torch.uint32
    expected = [
        [murmur_reference(int(s), int(p), int(c)) for c in columns]
        for s, p in zip(seeds, positions, strict=True)
    ]
    assert hashed.to(torch.int64).tolist() == expected


def test_min_p_is_applied_before_the_seeded_sampler() -> None:
    seen = {}

    def sampler(probs, top_ks, top_ps, min_ps, need_min_p, seed, positions, **options):  # type: ignore[no-untyped-def]
        seen.update(probs=probs, need_min_p=need_min_p, options=options)
        return probs.argmax(dim=-1)

    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.4, 0.4, 0.1, 0.1]])
    min_ps = torch.tensor([0.5, 0.0])  # the second request sets none
    sample = min_p_first(sampler)
    seed = torch.tensor([1, 2])
    sample(probs, None, None, min_ps, True, seed, torch.tensor([0, 0]), max_top_k=3)
    assert seen["need_min_p"] is False
    assert seen["options"] == {"max_top_k": 3}
    kept = torch.tensor([[0.5, 0.3, 0.0, 0.0], [0.4, 0.4, 0.1, 0.1]])
    assert torch.equal(seen["probs"], kept)
    # Without a seed SGLang's own min_p path runs, untouched.
    sample(probs, None, None, min_ps, True, None, torch.tensor([0, 0]))
    assert seen["need_min_p"] is True
    assert torch.equal(seen["probs"], probs)


def test_logprobs_without_the_end_of_turn_token_or_the_stop_string() -> None:
    meta = {
        "output_token_logprobs": [[-0.1, 5, "Hi"], [-0.2, 6, "!"], [-0.3, 2, "<|im_end|>"]],
        "output_top_logprobs": [[[-2.0, 9, "Yo"], [-0.1, 5, "Hi"]], None, None],
    }
    eot = EngineFinish(StopKind.END_OF_TURN, 3, 3)
    found = logprobs_of(meta, eot)
    assert [(t.text, t.token_id) for t in found] == [("Hi", 5), ("!", 6)]
    assert [t.text for t in found[0].top] == ["Hi", "Yo"]  # most likely first
    stop = EngineFinish(StopKind.STOP_STRING, 3, 3, matched="\n\n")
    meta = {"output_token_logprobs": [[-0.1, 5, "Hi"], [-0.2, 7, "\n"], [-0.2, 7, "\n"]]}
    assert [t.text for t in logprobs_of(meta, stop)] == ["Hi"]
    # A runtime that repeats the whole list on each chunk: only the new ones.
    assert [t.text for t in logprobs_of(meta, None, skip=1)] == ["\n", "\n"]


def test_a_token_given_no_chance_has_openais_floor_not_null() -> None:
    """SGLang's HTTP server sends a -inf logprob as null (JSON has no -inf), as the fuzz run
    through the router found (a 500); in-process it is -inf. Either is -9999.0, OpenAI's floor."""
    meta = {
        "output_token_logprobs": [[None, 5, "Hi"], [float("-inf"), 6, "!"]],
        "output_top_logprobs": [[[None, 9, "Yo"], [-0.1, 5, "Hi"]], None],
    }
    found = logprobs_of(meta, None)
    assert [t.logprob for t in found] == [-9999.0, -9999.0]
    assert [(t.text, t.logprob) for t in found[0].top] == [("Hi", -0.1), ("Yo", -9999.0)]


def test_top_p_0_and_top_k_1_are_greedy_decoding() -> None:
    """Whatever the temperature: on SGLang's greedy path, not through its sampler."""
    from server.engines.sglang.args import to_sampling_params

    for sampling in (
        Sampling(max_tokens=4, temperature=1.0, top_p=0),
        Sampling(max_tokens=4, temperature=0.7, top_k=1),
        Sampling(max_tokens=4, top_p=0.0),
    ):
        assert to_sampling_params(sampling)["temperature"] == 0
    sampled = to_sampling_params(Sampling(max_tokens=4, temperature=1.0, top_p=0.5, top_k=2))
    assert sampled["temperature"] == 1.0 and sampled["top_p"] == 0.5
