"""Runs at the start of SGLang's scheduler and detokenizer processes on CPUs (this folder is on
their PYTHONPATH only there): a CUDA torchvision must be able to import beside the CPU torch.
multiprocessing's resource tracker, spawned beside them, imports neither: it is left alone (the
fix imports torch, 2.5 CPU seconds)."""

import sys

if "multiprocessing.resource_tracker" not in " ".join(sys.orig_argv):
    from server.engines.sglang.cpu_compat import quiet_cpu_warnings
    from server.torch_compat import ensure_torchvision_loadable

    ensure_torchvision_loadable()
    quiet_cpu_warnings()
