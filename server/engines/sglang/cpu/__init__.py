"""SGLang on CPUs without AMX (SGLang's own CPU kernels are AMX-only): attention that computes
only what a step needs (`attention.py`), matrix products in the form each row count runs fastest
in (`linear.py`), prefill chunks sized in time (`chunking.py`), a Llama decode step without
SGLang's per-layer scaffolding (`decode.py`), and the gated RMSNorm of Gated DeltaNet layers,
Triton's elsewhere (`gated_norm.py`). Installed by the plugin, in every SGLang process; each
kernel replacement gives SGLang's own results (unit tests compare). The plugin registers
`backends()` in SGLang's attention registry, and `hooks()`, for what SGLang has no extension point,
with its hook registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def hooks() -> list[tuple[str, Callable[..., Any], str]]:
    """(target, hook, HookType name) for each piece of SGLang this path replaces or follows."""
    # Imported here: the package's `build` is imported without torch, before its first import.
    from server.engines.sglang.cpu import chunking, decode, gated_norm, linear

    replacements: dict[str, Callable[[Any], Any]] = {
        linear.LINEAR: linear.faster_linear,
        linear.LINEAR_INTO: linear.faster_linear_into,
        linear.LM_HEAD: linear.faster_lm_head,
        chunking.SIZER: chunking.clocked_chunks,
        chunking.RUN_BATCH: chunking.timed_forwards,
        decode.MODEL_FORWARD: decode.lean_forward,
        gated_norm.FORWARD: gated_norm.plain_forward,
    }
    planned = [
        (target, replacement(_resolve(target)), "REPLACE")
        for target, replacement in replacements.items()
    ]
    return [*planned, (linear.LOAD_MODEL, linear.prepared_after_loading, "AFTER")]


def backends() -> list[tuple[str, Callable[[Any], Any]]]:
    """(name, factory) for each attention backend this path registers in SGLang's attention
    registry, over SGLang's own of that name."""
    from server.engines.sglang.cpu import attention

    return [(attention.BACKEND_NAME, attention.create_backend)]


def _resolve(target: str) -> Any:
    """The function at a dotted path `module.Class.method`."""
    import importlib

    module_name, class_name, name = target.rsplit(".", 2)
    return getattr(getattr(importlib.import_module(module_name), class_name), name)
