"""b3os-infer's SGLang plugin (entry point group `sglang.srt.plugins`), which SGLang loads in each
of its processes (the main one first, before it reads its arguments). Everywhere, it lets seeded
sampling take min_p (`seeded_sampling.py`), and a tokenizer for which AutoTokenizer gives
transformers' generic class is loaded once rather than three times (`tokenizer_load.py`). On a CPU
it makes SGLang's deterministic inference, which seeded sampling rests on, available there: the CPU
attention backends join SGLang's deterministic lists (they compute each request alone, so the radix
cache stays on), SGLang's batch-invariant kernels, Triton and GPU-only, are not installed, and its
seeded sampler and repetition penalty run eagerly, and a hybrid model's prefix cache takes the
strategy a CPU has (`no_buffer`). On a CPU without AMX it also installs the faster
plain-torch model path of `cpu/`. In every process it keeps SGLang's list of model modules that do
not import on this machine (a dozen lines at each start, none about the model served) at debug
level. In the processes SGLang spawns it leaves SIGINT to the process that started them.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import signal

log = logging.getLogger(__name__)

CPU_ATTENTION_BACKENDS = ("torch_native", "intel_amx")
BATCH_INVARIANT_MODE = (
    "sglang.srt.model_executor.model_runner.ModelRunner.maybe_enable_batch_invariant_mode"
)
# Small steps SGLang wraps in torch.compile, which on a CPU builds C++ at first use: seconds,
# and a compiler (the slim CPU image has none). The seeded sampler runs at the first sampled
# token; the repetition penalty held the first request naming one 4.9 s, 30x the 0.16 s of the
# same request after it on the same server. Both run as the eager functions they wrap.
EAGER_ON_CPU = (
    "sglang.srt.layers.sampler.multinomial_with_seed",
    "sglang.srt.sampling.penaltylib.repetition_penalty.apply_scaling_penalties",
)
EXTRA_BUFFER_SUPPORT = "sglang.srt.arg_groups.overrides.supports_mamba_cache_extra_buffer"
MODEL_REGISTRY_LOGGER = "sglang.srt.models.registry"


def register() -> None:
    logging.getLogger(MODEL_REGISTRY_LOGGER).addFilter(_import_errors_at_debug)
    if multiprocessing.parent_process() is not None:
        # A terminal's Ctrl-C reaches the whole process group: SGLang's scheduler and
        # detokenizer would each die of it with a KeyboardInterrupt traceback. The process that
        # started them stops them when it stops.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    _seeded_min_p()
    _tokenizer_loaded_once()
    if os.environ.get("SGLANG_USE_CPU_ENGINE") != "1":
        return
    _deterministic_inference_on_cpu()
    _mamba_cache_without_snapshots()
    import torch

    if torch.cpu._is_amx_tile_supported():
        return  # SGLang's AMX backend has its own kernels
    from server.engines.sglang import cpu

    cpu.install()


def _import_errors_at_debug(record: logging.LogRecord) -> bool:
    """SGLang's "Ignore import error when loading sglang.srt.models.X" warnings, demoted to
    debug: shown only when SGLang logs at info, which `--log-level debug` sets (engine args)."""
    if not record.getMessage().startswith("Ignore import error when loading"):
        return True
    record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    return logging.getLogger().getEffectiveLevel() <= logging.INFO


def _seeded_min_p() -> None:
    from sglang.srt.layers import sampler
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from server.engines.sglang.seeded_sampling import TARGET, min_p_first

    original = sampler.top_k_top_p_min_p_sampling_from_probs_torch
    HookRegistry.register(TARGET, min_p_first(original), HookType.REPLACE)


def _tokenizer_loaded_once() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from server.engines.sglang import tokenizer_load

    HookRegistry.register(tokenizer_load.TARGET, tokenizer_load.load_generic_once, HookType.AROUND)


def _deterministic_inference_on_cpu() -> None:
    from sglang.srt.arg_groups import choices
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for options in (
        choices.DETERMINISTIC_ATTENTION_BACKEND_CHOICES,
        choices.RADIX_SUPPORTED_DETERMINISTIC_ATTENTION_BACKEND,
    ):
        options.extend(b for b in CPU_ATTENTION_BACKENDS if b not in options)
    HookRegistry.register(BATCH_INVARIANT_MODE, _no_batch_invariant_mode, HookType.REPLACE)
    for target in EAGER_ON_CPU:
        module_name, name = target.rsplit(".", 1)
        compiled = getattr(importlib.import_module(module_name), name)
        eager = getattr(compiled, "_torchdynamo_orig_callable", None)
        if eager is not None:
            HookRegistry.register(target, eager, HookType.REPLACE)


def _mamba_cache_without_snapshots() -> None:
    """A hybrid model's prefix cache (Qwen3.5's Gated DeltaNet states) on a CPU: SGLang's
    `auto` strategy picks `extra_buffer`, whose state snapshots it then refuses on any platform
    but a GPU's, so the start fails. Refused here as well, `auto` resolves to `no_buffer` (the
    states of cached prefixes kept in the radix tree, overlap scheduling off)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(EXTRA_BUFFER_SUPPORT, _no_extra_buffer, HookType.REPLACE)


def _no_extra_buffer(view: object, hf_config: object) -> bool:
    del view, hf_config
    return False


def _no_batch_invariant_mode(self: object) -> None:
    """SGLang's batch-invariant matmul and softmax are Triton kernels: none on a CPU."""
    del self
