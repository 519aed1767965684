"""The embedded model's folder: converted only from the GGUF this node was built against, and
served with the contract's 32,768-token window through YaRN, which SGLang's rotary embedding
takes from it; a folder converted before these settings gets them at the next start, without a
second conversion."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from server.config import default_cache_dir
from server.models import embedded, gguf_blocks
from server.models.embedded import ModelSetupError, converted_folder, ensure_converted

# config.json and generation_config.json as a conversion before the window was served wrote them.
OLD_ROPE = {"rope_theta": 100000.0, "rope_type": "default"}
OLD_GENERATION = {"bos_token_id": 1, "eos_token_id": 2}


def test_the_folder_serves_the_contracts_window_through_yarn() -> None:
    config = json.loads((ensure_converted(default_cache_dir()) / "config.json").read_text())
    assert config["max_position_embeddings"] == 32768
    assert config["rope_parameters"] == {
        "rope_theta": 100000.0,  # the model's own, kept
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 8192,
    }


# In a process of its own: SGLang's CPU mode is chosen when its modules are first imported.
ROTARY = """
import json, sys
from server.engines.sglang.cpu_compat import prepare_cpu_runtime
prepare_cpu_runtime()
from sglang.srt.layers.rotary_embedding.factory import get_rope
from transformers import AutoConfig
config = AutoConfig.from_pretrained(sys.argv[1])
rope = config.rope_parameters
rotary = get_rope(config.head_dim, config.head_dim, max_position=config.max_position_embeddings,
                  base=rope["rope_theta"], rope_scaling=dict(rope))
print(json.dumps({"class": type(rotary).__name__, "factor": rotary.scaling_factor,
                  "mscale": rotary.mscale, "positions": rotary.cos_sin_cache.shape[0]}))
"""


def test_sglangs_rotary_embedding_for_the_folder_is_yarn() -> None:
    """What SGLang's Llama attention builds from the folder's config: the call its
    LlamaDecoderLayer makes (rope_parameters as transformers gives them, as base and scaling, to
    get_rope), built here without a distributed setup. YaRN by 4, its attention sharpened
    (mscale above 1), and positions up to the window."""
    folder = ensure_converted(default_cache_dir())
    done = subprocess.run(
        [sys.executable, "-c", ROTARY, str(folder)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rotary = json.loads(done.stdout.strip().splitlines()[-1])
    assert rotary["class"] == "YaRNScalingRotaryEmbedding"
    assert rotary["factor"] == 4.0 and rotary["mscale"] > 1
    assert rotary["positions"] >= 32768


def old_conversion(cache_dir: Path) -> Path:
    """The embedded folder as an earlier start left it: converted, without the served window or
    the sampling (the weights linked, not copied)."""
    source = ensure_converted(default_cache_dir())
    folder = converted_folder(cache_dir)
    folder.mkdir(parents=True)
    for path in source.iterdir():
        if path.suffix == ".safetensors":
            (folder / path.name).symlink_to(path)
        else:
            shutil.copy(path, folder / path.name)
    config = json.loads((source / "config.json").read_text())
    config.update(max_position_embeddings=8192, rope_parameters=OLD_ROPE)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "generation_config.json").write_text(json.dumps(OLD_GENERATION))
    return folder


def test_a_folder_converted_before_gets_the_window_and_sampling_without_a_conversion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = old_conversion(tmp_path)

    def no_conversion(source: Path, target: Path) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(embedded, "_convert", no_conversion)
    assert ensure_converted(tmp_path) == folder
    config = json.loads((folder / "config.json").read_text())
    generation = json.loads((folder / "generation_config.json").read_text())
    assert config["max_position_embeddings"] == 32768
    assert config["rope_parameters"] == {**OLD_ROPE, **embedded.ROPE_SCALING}
    assert generation == {**OLD_GENERATION, **embedded.RECOMMENDED_SAMPLING}
    assert (folder / "model.safetensors").is_symlink()  # the weights as they were


def assert_converted_again(cache_dir: Path, monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """The next start converts `folder` again, once (the conversion stood in for by a copy)."""
    conversions = []

    def convert(source: Path, target: Path) -> None:
        conversions.append(target)
        shutil.rmtree(target)
        old_conversion(cache_dir)

    monkeypatch.setattr(embedded, "_convert", convert)
    assert ensure_converted(cache_dir) == folder
    assert conversions == [folder]


def test_a_folder_whose_config_lost_its_rotary_settings_is_converted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served with a default rope_theta, such a folder would answer nonsense: it is converted
    again rather than given the window on top."""
    folder = old_conversion(tmp_path)
    (folder / "config.json").write_text("{}")
    assert_converted_again(tmp_path, monkeypatch, folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["rope_parameters"] == {**OLD_ROPE, **embedded.ROPE_SCALING}


def test_a_folder_converted_before_the_gguf_blocks_were_kept_is_converted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = old_conversion(tmp_path)
    (folder / gguf_blocks.FILE).unlink()
    assert_converted_again(tmp_path, monkeypatch, folder)
    assert (folder / gguf_blocks.FILE).is_file()


def test_sglangs_loader_reads_the_model_and_leaves_the_blocks_to_the_node() -> None:
    """The blocks are the node's to load: SGLang's loader, which reads the folder's files of its
    patterns into the model, would warn of each of their tensors as a parameter it lacks."""
    sglang = importlib.util.find_spec("sglang")
    assert sglang is not None and sglang.origin is not None
    loader = (Path(sglang.origin).parent / "srt" / "model_loader" / "loader.py").read_text()
    lists = re.findall(r"allow_patterns = \[([^\]]*)\]", loader)
    patterns = {pattern for found in lists for pattern in re.findall(r'"([^"]*)"', found)}
    assert "*.safetensors" in patterns
    assert not any(fnmatch.fnmatch(gguf_blocks.FILE, pattern) for pattern in patterns)


def test_only_the_gguf_of_the_pinned_package_is_converted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert embedded.checked_gguf() == embedded.gguf_path()  # the installed file passes
    other = tmp_path / embedded.GGUF_FILE
    other.write_bytes(b"GGUF but not the model")
    monkeypatch.setattr(embedded, "gguf_path", lambda: other)
    with pytest.raises(ModelSetupError, match=r"has SHA-256 [0-9a-f]{64}, not the "):
        embedded.checked_gguf()
    with pytest.raises(ModelSetupError, match="reinstall it"):
        ensure_converted(tmp_path / "cache")  # nothing converted from it
    assert not converted_folder(tmp_path / "cache").exists()
