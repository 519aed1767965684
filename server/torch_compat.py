"""Lets a CUDA build of torchvision import beside a CPU build of torch (the light install).

PyPI's torchvision is built against CUDA; next to the CPU torch its C extension cannot load, and
its Python side then fails at import with "operator torchvision::nms does not exist". Transformers
imports torchvision while loading any config, and SGLang imports transformers. Defining the two op
schemas torchvision registers fake kernels for, before it loads, is enough: nothing here calls them.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)


def torchvision_needs_schemas() -> bool:
    """True when torchvision is a CUDA build and torch a CPU build, read without importing either:
    importing torchvision first would fail, and a torchvision that loads must not be patched."""
    tv_spec = importlib.util.find_spec("torchvision")
    torch_spec = importlib.util.find_spec("torch")
    if tv_spec is None or torch_spec is None or not tv_spec.submodule_search_locations:
        return False
    tv_version = _read_version(Path(tv_spec.submodule_search_locations[0]) / "version.py")
    torch_dir = torch_spec.submodule_search_locations or []
    torch_version = _read_version(Path(torch_dir[0]) / "version.py") if torch_dir else ""
    return "+cu" in tv_version and "+cu" not in torch_version


def _read_version(path: Path) -> str:
    try:
        match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", path.read_text())
    except OSError:
        return ""
    return match.group(1) if match else ""


def ensure_torchvision_loadable() -> None:
    """Idempotent; a no-op wherever torchvision matches torch (GPU images, CPU wheels)."""
    if torchvision_needs_schemas():
        _define_schemas()


@functools.cache
def _define_schemas() -> object:
    # Cached because torch drops a Library's definitions when the object is garbage collected: the
    # schemas are process-wide, as torch's operator registry is.
    import torch

    library = torch.library.Library("torchvision", "FRAGMENT")
    for schema in _SCHEMAS:
        if not _defined(schema.split("(", 1)[0]):
            library.define(schema)
    return library


def _defined(name: str) -> bool:
    import torch

    try:
        torch._C._dispatch_find_schema_or_throw(f"torchvision::{name}", "")
    except RuntimeError:
        return False
    return True
