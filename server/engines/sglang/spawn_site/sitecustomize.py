"""Runs at the start of SGLang's scheduler and detokenizer processes on CPUs (this folder is on
their PYTHONPATH only there): a CUDA torchvision must be able to import beside the CPU torch."""

from server.engines.sglang.cpu_compat import quiet_cpu_warnings
from server.torch_compat import ensure_torchvision_loadable

ensure_torchvision_loadable()
quiet_cpu_warnings()
