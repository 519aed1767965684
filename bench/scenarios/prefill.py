"""Prefill speed against prompt length: tokens per second to the first token of a cold prompt
(never seen) and of a warm one (the same prompt with a new last question, its prefix in the
cache), beside what this machine can do (its GEMM rate in the dtype the node computes in, and
its memory bandwidth, measured in the same run) and llama.cpp on the same GGUF (node-llama-cpp,
`bench/llamacpp/`), one request at a time on an idle server; with --compare-url or
--compare-sglang, SGLang's own server too."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import machine, prompts
from bench.client import client, stream
from bench.report import Row
from bench.run import Run
from bench.scenarios.interference import long_text
from bench.target import Target

NAME = "prefill"
NOTE = (
    "One request at a time, max_tokens 1. 'GEMM share' is the prompt's FLOPs (the model's "
    "linear layers and causal attention) per second of TTFT over this machine's GEMM rate "
    "measured in the same run, in the dtype the node computes in (bf16 where the CPU multiplies "
    "it natively, else fp32). llama.cpp evaluates the same number of tokens of its own "
    "tokenization, cold, on every core. Decode: one stream, tokens/s after the first."
)
# Up to the embedded model's whole window (32,768 tokens): what a full agent session costs.
LENGTHS, QUICK_LENGTHS = (1000, 2000, 4000, 8000, 16000, 32000), (1000,)
LLAMACPP = Path(__file__).resolve().parent.parent / "llamacpp"
DECODE_TOKENS = 64
# A whole window's first token can take many minutes on a CPU (that is what is measured).
TIMEOUT_S = 3600
# SmolLM2-135M-Instruct: 30 layers, hidden 576 (9 heads of 64, 3 KV heads), MLP 1,536.
LINEAR_FLOPS = 2 * 30 * (576 * (576 + 2 * 192 + 576) + 3 * 576 * 1536)
ATTENTION_FLOPS = 30 * 4 * 576  # per token per key: QK and PV


def prompt_flops(tokens: int) -> float:
    return tokens * LINEAR_FLOPS + ATTENTION_FLOPS * tokens * (tokens + 1) / 2


async def _measure(target: Target, lengths: tuple[int, ...], tag: str) -> list[dict[str, Any]]:
    found = []
    async with client(timeout=TIMEOUT_S) as http:
        for length in lengths:
            # A little shorter than asked, so that the template and the answer fit the window.
            text = long_text(int(length * 0.97), f"{tag} {length}")
            cold = await stream(http, target, "chat", prompts.body("chat", target.model, text, 1))
            warm = await stream(
                http,
                target,
                "chat",
                prompts.body("chat", target.model, text + " And one more thing?", 1),
            )
            found.append({"cold": cold, "warm": warm})
        # Greedy decoding goes on repeating the answer's start: all DECODE_TOKENS come.
        body = prompts.body("chat", target.model, "Write the word dog fifty times.", DECODE_TOKENS)
        body["messages"].append({"role": "assistant", "content": "dog dog dog dog dog dog"})
        decode = await stream(http, target, "chat", body)
    return [*found, {"decode": decode}]


def _llamacpp(lengths: tuple[int, ...]) -> dict[str, Any] | None:
    """node-llama-cpp's measurement (bench/llamacpp/prefill.mjs), or None when it is not
    installed (`make bench-clients`)."""
    if not (LLAMACPP / "node_modules").is_dir():
        print(
            "llama.cpp: not installed (make bench-clients); its column is left out", file=sys.stderr
        )
        return None
    from server.models.embedded import gguf_path

    command = ["node", "prefill.mjs", str(gguf_path()), ",".join(map(str, lengths))]
    done = subprocess.run(command, cwd=LLAMACPP, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        print(f"llama.cpp failed: {done.stderr[-2000:]}", file=sys.stderr)
        return None
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run(run: Run) -> list[Row]:
    lengths = QUICK_LENGTHS if run.config.quick else LENGTHS
    measured = run.machine or machine.measure()
    rows = [
        Row(
            NAME,
            f"this machine ({measured.gemm_dtype} GEMM)",
            {"GEMM GFLOP/s": measured.gemm_gflops, "memory GB/s": measured.memory_gb_s},
        )
    ]
    targets = [run.ours] + ([run.compare] if run.compare else [])
    for index, target in enumerate(targets):
        tag = f"Run {run.folder.name}, server {index}"
        results = asyncio.run(_measure(target, lengths, tag))
        for length, result in zip(lengths, results, strict=False):
            cold, warm = result["cold"], result["warm"]
            seconds = cold.ttft_ms / 1000
            rows.append(
                Row(
                    NAME,
                    f"{target.name}, {length} tokens",
                    {
                        "prompt tokens": cold.prompt_tokens,
                        "cold TTFT s": seconds,
                        "cold tok/s": cold.prompt_tokens / seconds,
                        "GEMM share": prompt_flops(cold.prompt_tokens)
                        / seconds
                        / 1e9
                        / measured.gemm_gflops,
                        "warm TTFT s": warm.ttft_ms / 1000,
                        "warm tok/s": warm.prompt_tokens / (warm.ttft_ms / 1000),
                    },
                )
            )
        decode = results[-1]["decode"]
        rows.append(Row(NAME, f"{target.name}, decode", {"decode tok/s": decode.tokens_per_s}))
    llama = _llamacpp(lengths)
    if llama is not None:
        for entry in llama["prefill"]:
            tokens, seconds = entry["tokens"], entry["seconds"]
            rows.append(
                Row(
                    NAME,
                    f"llama.cpp, {tokens} tokens",
                    {
                        "prompt tokens": tokens,
                        "cold TTFT s": seconds,
                        "cold tok/s": tokens / seconds,
                        "GEMM share": prompt_flops(tokens) / seconds / 1e9 / measured.gemm_gflops,
                    },
                )
            )
        rows.append(Row(NAME, "llama.cpp, decode", {"decode tok/s": llama["decode_tok_s"]}))
    return rows
