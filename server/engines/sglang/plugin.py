"""b3os-infer's SGLang plugin (entry point group `sglang.srt.plugins`), which SGLang loads in
each of its processes: on a CPU without AMX, where SGLang serves with its plain-torch attention,
it installs the faster prefill of `cpu_attention.py`. Anywhere else it does nothing."""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def register() -> None:
    if os.environ.get("SGLANG_USE_CPU_ENGINE") != "1":
        return
    import torch

    if torch.cpu._is_amx_tile_supported():
        return  # SGLang's AMX backend has its own kernels
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from server.engines.sglang.cpu_attention import TARGET, new_tokens_only

    original = TorchNativeAttnBackend._run_sdpa_forward_extend
    HookRegistry.register(TARGET, new_tokens_only(original), HookType.REPLACE)
    log.info("plain-torch attention: prefill attends from new tokens only")
