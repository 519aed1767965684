"""SGLang on CPUs without AMX (SGLang's own CPU kernels are AMX-only): attention that computes
only what a step needs (`attention.py`), matrix products in the form each row count runs fastest
in (`linear.py`), prefill chunks sized in time (`chunking.py`), a Llama decode step without
SGLang's per-layer scaffolding (`decode.py`), and the gated RMSNorm of Gated DeltaNet layers,
Triton's elsewhere (`gated_norm.py`). Installed by the plugin, in every SGLang process; each
kernel replacement gives SGLang's own results (unit tests compare). The plugin registers
`hooks()` with SGLang's hook registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from server.engines.sglang.cpu import attention, chunking, decode, gated_norm, linear


def hooks() -> list[tuple[str, Callable[..., Any], str]]:
    """(target, hook, HookType name) for each piece of SGLang this path replaces or follows."""
    replacements: dict[str, Callable[[Any], Any]] = {
        attention.EXTEND: attention.planned_extend,
        attention.DECODE: attention.planned_decode,
        attention.METADATA: attention.planned_metadata,
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


def _resolve(target: str) -> Any:
    """The function at a dotted path `module.Class.method`."""
    import importlib

    module_name, class_name, name = target.rsplit(".", 2)
    return getattr(getattr(importlib.import_module(module_name), class_name), name)
