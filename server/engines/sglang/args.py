"""Our settings and canonical sampling, as SGLang's server arguments and sampling parameters."""

from __future__ import annotations

import secrets
from importlib import metadata
from typing import Any

from server.canonical import Sampling
from server.config import Settings
from server.engines.base import Constraint
from server.engines.sglang import cpu_compat
from server.models.source import ModelSource

# On a CPU SGLang sizes its KV cache from free RAM; bound it (tokens, all requests together).
CPU_MAX_TOTAL_TOKENS = 65536
# A hybrid model's (Qwen3.5's) recurrent states, one per running request and one per cached prefix
# end: on a CPU SGLang would size them from free RAM too, far past what a CPU serves. Each is the
# whole state of every Gated DeltaNet layer; models without any ignore the bound.
CPU_MAX_MAMBA_STATES = 64
# SGLang documents top_p as (0, 1]; 0 keeps only the most probable token, and so does this.
TOP_P_FLOOR = 1e-9
GREEDY = 0.0
SEED_RANGE = 2**63


def default_device() -> str:
    """cuda where torch sees a GPU, else cpu; a CPU build of torch (its release's local part,
    `+cpu`) answered without importing it (the forkserver starts before torch's import)."""
    try:
        if metadata.version("torch").endswith("+cpu"):
            return "cpu"
        import torch
    except (ImportError, metadata.PackageNotFoundError):
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def server_args(settings: Settings, source: ModelSource) -> dict[str, Any]:
    device = settings.device or default_device()
    args: dict[str, Any] = {
        "model_path": source.path,
        "tokenizer_path": source.path,
        "served_model_name": source.served_name,
        "device": device,
        "tp_size": settings.tp_size,
        # Deltas rather than SGLang's default cumulative text: O(1) work per streamed chunk.
        "incremental_streaming_output": True,
        # An idle scheduler otherwise spins a core at 100% (measured on CPU; SGLang says the same
        # of GPUs): it waits on its sockets instead, and wakes the moment a request arrives.
        "sleep_on_idle": True,
        # Per-request timings in its outputs (queue time: the request log's `queue` phase), and
        # its Prometheus metrics.
        "enable_metrics": True,
        # SGLang logs every batch at info; ours says what a request did.
        "log_level": "info" if settings.log_level == "debug" else "warning",
    }
    optional = {
        "context_length": settings.context_length,
        "mem_fraction_static": settings.mem_fraction_static,
        "max_running_requests": settings.max_running_requests,
        "max_total_tokens": settings.max_total_tokens,
    }
    args.update({key: value for key, value in optional.items() if value is not None})
    deterministic = settings.deterministic_sampling is not False  # on unless turned off
    if deterministic:
        # SGLang honours a request's sampling seed only in its deterministic mode.
        args["enable_deterministic_inference"] = True
    if device == "cpu":
        if cpu_compat.cpu_computes_bf16():
            args.setdefault("max_total_tokens", CPU_MAX_TOTAL_TOKENS)
        else:
            # Without native bf16 the GEMMs convert every element: fp32 prefills several times
            # faster. The KV cache is fp32 too, read in place by the attention with no copy
            # (cpu/attention.py): as many bytes as a bf16 cache of twice the tokens.
            args["dtype"] = "float32"
            args.setdefault("max_total_tokens", CPU_MAX_TOTAL_TOKENS // 2)
        args["max_mamba_cache_size"] = CPU_MAX_MAMBA_STATES
        # One long prompt must not hold the CPU: it prefills in chunks sized in time
        # (cpu/chunking.py), the running streams decode within each chunk's forward, and a
        # short prompt that arrives is prefilled beside the next chunk rather than after the
        # whole long one.
        args.update(enable_mixed_chunk=True, schedule_policy="shortest-prefill-first")
        if deterministic:
            # SGLang's deterministic mode wants a named backend (on a GPU it picks one). SGLang's
            # own CPU default is named: intel_amx, which falls back to torch_native without AMX
            # after the check that would turn off CPU decode graphs for torch_native by name.
            args["attention_backend"] = "intel_amx"
    return args


def runtime_env(settings: Settings) -> dict[str, str]:
    """Environment for SGLang's processes. The queue bound is the scheduler's own: it counts a
    request's time in the waiting queue only, never the prefill of one it has started, and
    drops a request past it unstarted (503 from the runtime, see outputs.py)."""
    if settings.max_queue_wait <= 0:
        return {}
    return {"SGLANG_REQ_WAITING_TIMEOUT": f"{settings.max_queue_wait:g}"}


def logprob_options(sampling: Sampling) -> dict[str, Any]:
    """SGLang's generate arguments for the answer tokens' logprobs (none of the prompt's), with
    each token's text."""
    if not sampling.logprobs:
        return {}
    return {
        "return_logprob": True,
        "top_logprobs_num": sampling.top_logprobs or 0,
        "logprob_start_len": -1,
        "return_text_in_logprobs": True,
    }


def to_sampling_params(
    sampling: Sampling, constraint: Constraint | None = None, special_tokens: bool = False
) -> dict[str, Any]:
    params: dict[str, Any] = {"max_new_tokens": sampling.max_tokens}
    if special_tokens:
        params["skip_special_tokens"] = False
    if sampling.temperature is not None:
        params["temperature"] = sampling.temperature
    if sampling.top_p == 0 or sampling.top_k == 1:
        # Only the most likely token is kept: greedy decoding, on SGLang's greedy path, so the
        # answer is greedy's own (through the sampler it could part from it where the two best
        # logits are a bf16 step apart).
        params["temperature"] = GREEDY
    if sampling.top_p is not None:
        params["top_p"] = max(sampling.top_p, TOP_P_FLOOR)
    if sampling.top_k is not None:
        params["top_k"] = sampling.top_k
    # SGLang's seeded sampler gives every request without a seed the same one (42): each gets
    # its own instead. A runtime outside deterministic mode ignores it.
    # Any integer seed is taken, reduced into [0, 2**63): SGLang holds seeds as int64, and
    # sglang-router as u64.
    seed = secrets.randbits(63) if sampling.seed is None else sampling.seed % SEED_RANGE
    params["sampling_seed"] = seed
    if sampling.stop:
        params["stop"] = list(sampling.stop)
    optional = {
        "min_p": sampling.min_p,
        "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty,
        "repetition_penalty": sampling.repetition_penalty,
    }
    params.update({key: value for key, value in optional.items() if value is not None})
    if sampling.logit_bias:
        params["logit_bias"] = {str(token): bias for token, bias in sampling.logit_bias.items()}
    if constraint is not None:
        params[constraint.kind] = constraint.value  # xgrammar compiles it, SGLang caches it
    return params
