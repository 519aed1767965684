"""b3os-infer's SGLang plugin (entry point group `sglang.srt.plugins`), which SGLang loads in each
of its processes (the main one first, before it reads its arguments). Everywhere, it lets seeded
sampling take min_p (`seeded_sampling.py`), and a tokenizer for which AutoTokenizer gives
transformers' generic class is loaded once rather than three times (`tokenizer_load.py`). On a CPU
it makes SGLang's deterministic inference, which seeded sampling rests on, available there: the CPU
attention backends join SGLang's deterministic lists (they compute each request alone, so the radix
cache stays on), SGLang's batch-invariant kernels, Triton and GPU-only, are not installed, and its
seeded sampler and repetition penalty run eagerly, and a hybrid model's prefix cache takes the
strategy a CPU has (`no_buffer`), and its processes fork from the node's forkserver where it runs
(`forkserver.py`). On a CPU without SGLang's own CPU kernels (AMX's) it also installs the faster
plain-torch model path of `cpu/` (its attention backend through SGLang's attention registry, the
rest through its hook registry). In every process it keeps SGLang's notices that ask nothing of
the operator at debug level (`notices.py`). In the processes SGLang spawns it leaves SIGINT to
the process that started them, and SGLang's scheduler refuses to start where a replacement did
not apply in its process.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from server.engines.sglang import cpu_compat, forkserver, notices

log = logging.getLogger(__name__)

CPU_ATTENTION_BACKENDS = ("torch_native", "intel_amx")
BATCH_INVARIANT_MODE = (
    "sglang.srt.model_executor.model_runner.ModelRunner.maybe_enable_batch_invariant_mode"
)
# Small steps SGLang wraps in torch.compile, which on a CPU builds C++ at first use: seconds,
# and a compiler (the slim CPU image has none). The seeded sampler runs at the first sampled
# token; the repetition penalty held the first request naming one for seconds, many times what
# the same request took after it. Both run as the eager functions they wrap: so does every such
# step where TorchDynamo is off (`cpu_compat`), and these only need replacing where it is on.
EAGER_ON_CPU = (
    "sglang.srt.layers.sampler.multinomial_with_seed",
    "sglang.srt.sampling.penaltylib.repetition_penalty.apply_scaling_penalties",
)
EXTRA_BUFFER_SUPPORT = "sglang.srt.arg_groups.overrides.supports_mamba_cache_extra_buffer"
SCHEDULER_INIT = "sglang.srt.managers.scheduler.Scheduler.__init__"
SET_ENVS_AND_CONFIG = "sglang.srt.entrypoints.engine._set_envs_and_config"


@dataclass(frozen=True)
class Hook:
    target: str  # the dotted path SGLang's hook registry resolves
    hook: Callable[..., Any]
    kind: str  # a HookType's name


def register() -> None:
    notices.install()
    if multiprocessing.parent_process() is not None:
        # A terminal's Ctrl-C reaches the whole process group: SGLang's scheduler and
        # detokenizer would each die of it with a KeyboardInterrupt traceback. The process that
        # started them stops them when it stops.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    from sglang.srt.layers.attention.attention_registry import register_attention_backend
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    cpu = on_cpu()
    if cpu:
        _deterministic_backends_on_cpu()
    for name, factory in attention_backends(cpu):
        register_attention_backend(name)(factory)
    for planned in hooks(cpu):
        HookRegistry.register(planned.target, planned.hook, HookType[planned.kind])


def on_cpu() -> bool:
    """Whether this process runs SGLang's CPU engine (`cpu_compat.prepare_cpu_runtime`)."""
    return os.environ.get("SGLANG_USE_CPU_ENGINE") == "1"


def hooks(cpu: bool) -> list[Hook]:
    """Every replacement this plugin makes in SGLang: everywhere, and on a CPU (`cpu`) those of
    the CPU path. Resolving a target that is not there raises."""
    planned = [
        _seeded_min_p(),
        _tokenizer_loaded_once(),
        Hook(SCHEDULER_INIT, _replacements_checked, "BEFORE"),
    ]
    if not cpu:
        return planned
    planned += _deterministic_inference_on_cpu()
    planned.append(Hook(EXTRA_BUFFER_SUPPORT, _no_extra_buffer, "REPLACE"))
    planned.append(Hook(SET_ENVS_AND_CONFIG, forkserver.forked, "AFTER"))
    if (path := _cpu_path(cpu)) is None:
        return planned
    return planned + [Hook(target, hook, kind) for target, hook, kind in path.hooks()]


def attention_backends(cpu: bool) -> list[tuple[str, Callable[[Any], Any]]]:
    """The attention backends this plugin registers in SGLang's attention registry, by name
    (SGLang's own of that name replaced): on a CPU without SGLang's CPU kernels, the CPU path's."""
    return [] if (path := _cpu_path(cpu)) is None else path.backends()


def _cpu_path(cpu: bool) -> Any:
    """The CPU path's module (`cpu/`) where it applies: on a CPU where SGLang's own CPU kernels do
    not serve (`cpu_compat.sglang_cpu_kernels`)."""
    if not cpu or cpu_compat.sglang_cpu_kernels():
        return None
    from server.engines.sglang import cpu as cpu_path

    return cpu_path


def unapplied(cpu: bool) -> list[str]:
    """What of `attention_backends(cpu)` and `hooks(cpu)` SGLang's registries do not hold in
    this process (after its `load_plugins`): a target that did not resolve, a hook that failed
    to wrap, or the plugin not run at all. SGLang logs each such failure and goes on; a node
    refuses to start on it."""
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.plugins.hook_registry import HookRegistry

    try:
        wanted, backends = hooks(cpu), attention_backends(cpu)
    except Exception as error:  # a target gone from SGLang: named in the message
        return [f"the plugin's hooks ({type(error).__name__}: {error})"]
    missing = [
        f"the {name} attention backend"
        for name, factory in backends
        if ATTENTION_BACKENDS.get(name) is not factory
    ]
    return missing + [
        planned.target for planned in wanted if planned.target not in HookRegistry._patched
    ]


def _replacements_checked(*args: Any, **kwargs: Any) -> None:
    """Before SGLang's scheduler, where the model runs, is built: every replacement applied in
    its process too, or it fails, and with it the start (the main process checks its own)."""
    del args, kwargs
    missing = unapplied(on_cpu())
    if missing:
        from server.models.embedded import ModelSetupError

        raise ModelSetupError(
            f"SGLang's scheduler process did not take this node's replacements of "
            f"{', '.join(missing)} (see the log above for why); the node serves none half-patched"
        )


def _seeded_min_p() -> Hook:
    from sglang.srt.layers import sampler

    from server.engines.sglang.seeded_sampling import TARGET, min_p_first

    original = sampler.top_k_top_p_min_p_sampling_from_probs_torch
    return Hook(TARGET, min_p_first(original), "REPLACE")


def _tokenizer_loaded_once() -> Hook:
    from server.engines.sglang import tokenizer_load

    return Hook(tokenizer_load.TARGET, tokenizer_load.load_generic_once, "AROUND")


def _deterministic_backends_on_cpu() -> None:
    from sglang.srt.arg_groups import choices

    for options in (
        choices.DETERMINISTIC_ATTENTION_BACKEND_CHOICES,
        choices.RADIX_SUPPORTED_DETERMINISTIC_ATTENTION_BACKEND,
    ):
        options.extend(b for b in CPU_ATTENTION_BACKENDS if b not in options)


def _deterministic_inference_on_cpu() -> list[Hook]:
    planned = [Hook(BATCH_INVARIANT_MODE, _no_batch_invariant_mode, "REPLACE")]
    dynamo_off = os.environ.get(cpu_compat.DYNAMO_DISABLE) == "1"
    for target in EAGER_ON_CPU:
        module_name, name = target.rsplit(".", 1)
        compiled = getattr(importlib.import_module(module_name), name)
        eager = getattr(compiled, "_torchdynamo_orig_callable", None)
        if eager is None and dynamo_off:
            continue  # torch.compile gave SGLang the function itself
        if eager is None:
            raise AttributeError(f"{target} is not a torch.compile'd function")
        planned.append(Hook(target, eager, "REPLACE"))
    return planned


def _no_extra_buffer(view: object, hf_config: object) -> bool:
    """A hybrid model's prefix cache (Qwen3.5's Gated DeltaNet states) on a CPU: SGLang's
    `auto` strategy picks `extra_buffer`, whose state snapshots it then refuses on any platform
    but a GPU's, so the start fails. Refused here as well, `auto` resolves to `no_buffer` (the
    states of cached prefixes kept in the radix tree, overlap scheduling off)."""
    del view, hf_config
    return False


def _no_batch_invariant_mode(self: object) -> None:
    """SGLang's batch-invariant matmul and softmax are Triton kernels: none on a CPU."""
    del self
