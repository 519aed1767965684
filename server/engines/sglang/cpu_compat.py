"""What SGLang 0.5.23 needs to run on a CPU, applied only there (GPUs run stock SGLang):

- `SGLANG_USE_CPU_ENGINE=1`: SGLang's own CPU mode (`--device cpu` alone imports vLLM).
- a stand-in `sgl_kernel` ahead of any installed one, wherever SGLang's own CPU kernels are not
  there to serve: on CPUs without AMX, and on AMX CPUs without their build installed (PyPI's kernel
  packages are CUDA builds; upstream's CPU kernels are built from source for AMX Xeons);
- torchvision's op schemas (see `server.torch_compat`), in this process and, through a
  `sitecustomize` on their PYTHONPATH, in the processes SGLang spawns;
- the CPU kernels compiled for this machine (`cpu/build.py`), named in their environment;
- TorchDynamo off (`TORCHDYNAMO_DISABLE=1`, unless the operator sets it): SGLang wraps small
  steps in `torch.compile` at import, which imports inductor in every process, a good part of
  each one's start, and would build C++ at a step's first use; on a CPU they run eager.
"""

from __future__ import annotations

import importlib.machinery
import logging
import os
import sys
import warnings
from pathlib import Path

from server.torch_compat import ensure_torchvision_loadable

STAND_IN = Path(__file__).parent / "stand_in"  # holds the sgl_kernel stand-in
SPAWN_SITE = Path(__file__).parent / "spawn_site"  # holds the sitecustomize of spawned processes
DYNAMO_DISABLE = "TORCHDYNAMO_DISABLE"  # torch's switch: torch.compile returns the function as is

log = logging.getLogger(__name__)


def cpu_has_amx() -> bool:
    import torch

    return bool(torch.cpu._is_amx_tile_supported())


def sglang_cpu_kernels() -> bool:
    """Whether SGLang's own CPU kernels serve on this machine: an AMX CPU with an `sgl_kernel`
    installed (its CPU build, built from source), not the stand-in. Elsewhere the stand-in and
    the CPU path (`cpu/`) serve, AMX or not: SGLang itself then takes its layers' plain-torch
    branches (its `cpu_has_amx_support` asks for the kernels too)."""
    search = [entry for entry in sys.path if entry != str(STAND_IN)]
    if importlib.machinery.PathFinder.find_spec("sgl_kernel", search) is None:
        return False  # answered without importing torch: the common case, the light install
    return cpu_has_amx()


def cpu_computes_bf16() -> bool:
    """Whether the CPU multiplies bf16 natively (AMX, AVX-512 BF16); without it, bf16 GEMMs
    convert every element and run several times slower than fp32."""
    import torch

    return cpu_has_amx() or bool(torch.cpu._is_avx512_bf16_supported())


def quiet_cpu_warnings() -> None:
    """SGLang warns at import, in every process, that CUDA-only features (AWQ, GGUF, Triton) are
    not on a CPU; none of them is used here."""
    warnings.filterwarnings("ignore", category=UserWarning, module=r"sglang\.")


def cpu_environment() -> None:
    """Idempotent, without importing torch: the environment SGLang's CPU processes read, and
    the forkserver's interpreter (`forkserver.py`) is started with."""
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
    os.environ.setdefault(DYNAMO_DISABLE, "1")  # read by torch.compile, as SGLang imports
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(SPAWN_SITE) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(SPAWN_SITE), *filter(None, paths)])


def prepare_cpu_runtime() -> None:
    """Idempotent; call before importing sglang."""
    cpu_environment()
    ensure_torchvision_loadable()
    quiet_cpu_warnings()
    if sglang_cpu_kernels():
        log.info("CPU has AMX: using the installed sgl_kernel CPU build")
        return
    log.info(
        "CPU %s: using the sgl_kernel stand-in and SGLang's plain-torch layers",
        "has AMX, but no sgl_kernel CPU build is installed" if cpu_has_amx() else "without AMX",
    )
    if str(STAND_IN) not in sys.path:
        sys.path.insert(0, str(STAND_IN))  # processes SGLang spawns inherit sys.path


def compile_kernels(cache_dir: Path) -> None:
    """The C kernels of the CPU path (where SGLang's own do not serve) compiled into `cache_dir`
    (at once where this machine has them) and named for SGLang's processes; without a compiler,
    logged, and their attention runs on torch's kernels."""
    if sglang_cpu_kernels():
        return
    from server.engines.sglang.cpu import build

    try:
        path = build.build(cache_dir)
    except build.BuildError as error:
        log.warning("CPU kernels not compiled, decode steps run slower on torch's (%s)", error)
        os.environ.pop(build.KERNELS_ENV, None)
        return
    log.info("CPU kernels: %s", path)
    os.environ[build.KERNELS_ENV] = str(path)
