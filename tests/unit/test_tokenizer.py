"""The front's tokenizer is the one AutoTokenizer gives (the engine gets the front's token ids),
and where that is transformers' generic class it is loaded without torch."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from server import tokenizer as tokenizer_module
from server.config import default_cache_dir
from server.models.embedded import ensure_converted
from server.tokenizer import autotokenizer_gives_generic, load_tokenizer, replaced_model_types
from server.torch_compat import ensure_torchvision_loadable
from tests.unit.tokenizer_folders import typed_copy


@pytest.fixture(scope="module")
def embedded() -> Path:
    return ensure_converted(default_cache_dir())


def auto_tokenizer(folder: Path) -> Any:
    ensure_torchvision_loadable()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def test_the_generic_tokenizer_loads_as_autotokenizer_would_and_without_torch(
    embedded: Path, tmp_path: Path
) -> None:
    """The embedded model's tokenizer is transformers' generic class: loaded directly, it is the
    tokenizer AutoTokenizer gives (same class, ids, pieces, template), and torch stays out of the
    process (a front on the remote or replay engine starts seconds sooner)."""
    script = (
        "import sys; from server.tokenizer import load_tokenizer; "
        f"load_tokenizer({str(embedded)!r}); print('torch' in sys.modules)"
    )
    imported = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert imported.stdout.split() == ["False"]

    direct, auto = load_tokenizer(str(embedded)), auto_tokenizer(embedded)
    assert type(direct) is type(auto)
    text = "<|im_start|>user\nnaïve café — 東京 🚀 def f(x):\n\treturn x**2<|im_end|>"
    ids = direct.encode(text, add_special_tokens=False)
    assert ids == auto.encode(text, add_special_tokens=False)
    assert direct.decode(ids) == auto.decode(ids) == text
    pieces = direct.convert_ids_to_tokens(ids)  # type: ignore[attr-defined]
    assert pieces == auto.convert_ids_to_tokens(ids)
    conversation = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    rendered = direct.apply_chat_template(conversation, tokenize=False)
    assert rendered == auto.apply_chat_template(conversation, tokenize=False)

    # A folder naming a class of its own goes through AutoTokenizer.
    typed_copy(embedded, tmp_path, "llama")
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({**config, "tokenizer_class": "GPT2Tokenizer"})
    )
    assert type(load_tokenizer(str(tmp_path))).__name__ == "GPT2Tokenizer"


def test_the_types_read_from_transformers_source_are_its_own() -> None:
    """Read without torch, in a process that has not imported transformers' module."""
    script = (
        "import json, sys; from server.tokenizer import replaced_model_types; "
        "print(json.dumps(sorted(replaced_model_types()))); print('torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    read, torch_imported = done.stdout.splitlines()
    ensure_torchvision_loadable()
    from transformers.models.auto import tokenization_auto

    assert json.loads(read) == sorted(tokenization_auto.MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS)
    assert torch_imported == "False"


@pytest.mark.parametrize(
    ("source", "read"),
    [
        ("T: set[str] = {'a', 'b'}\nother = T", {"a", "b"}),
        ("T = {'a'}\nT.add('b')", None),
        ("T = {'a'}\nT |= {'b'}", None),
        ("T = {'a'}\nT = {'b'}", None),
        ("T = set(['a'])", None),
        ("T = {'a', x}", None),
    ],
)
def test_only_a_literal_set_never_changed_is_read_from_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, read: set[str] | None
) -> None:
    (tmp_path / "auto.py").write_text(source)
    monkeypatch.setattr(tokenizer_module, "AUTO_TOKENIZER_SOURCE", tmp_path / "auto.py")
    monkeypatch.setattr(tokenizer_module, "REPLACED_TYPES_NAME", "T")
    monkeypatch.delitem(sys.modules, tokenizer_module.AUTO_TOKENIZER_MODULE, raising=False)
    assert replaced_model_types() == read


# qwen2: transformers replaces the declared generic class by Qwen2Tokenizer; gemma: a type with a
# class of its own that AutoTokenizer leaves to the declared one; llama: no class of its own.
@pytest.mark.parametrize("model_type", ["qwen2", "gemma", "llama"])
def test_a_folder_declaring_the_generic_class_gets_autotokenizers_class(
    embedded: Path, tmp_path: Path, model_type: str
) -> None:
    folder = typed_copy(embedded, tmp_path, model_type)
    auto = auto_tokenizer(folder)
    assert autotokenizer_gives_generic(folder) == (type(auto).__name__ == "TokenizersBackend")
    assert type(load_tokenizer(str(folder))) is type(auto)


def test_a_table_that_cannot_be_read_leaves_the_choice_to_autotokenizer(
    embedded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert autotokenizer_gives_generic(embedded)
    monkeypatch.setattr(tokenizer_module, "REPLACED_TYPES_NAME", "NO_SUCH_TABLE")
    ensure_torchvision_loadable()
    importlib.import_module(tokenizer_module.AUTO_TOKENIZER_MODULE)
    assert replaced_model_types() is None  # as imported
    monkeypatch.delitem(sys.modules, tokenizer_module.AUTO_TOKENIZER_MODULE, raising=False)
    assert replaced_model_types() is None  # from the source
    assert not autotokenizer_gives_generic(embedded)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("tekken.json", "{}"),  # a Mistral vocabulary: mistral_common's tokenizer where installed
        ("config.json", "{not json"),  # AutoTokenizer fails on it, as the engine would
        ("config.json", '{"model_type": "llama", "model_name": ["a", "list"]}'),
    ],
)
def test_what_the_generic_path_cannot_vouch_for_goes_to_autotokenizer(
    embedded: Path, tmp_path: Path, name: str, content: str
) -> None:
    folder = typed_copy(embedded, tmp_path, "llama")
    (folder / name).write_text(content)
    assert not autotokenizer_gives_generic(folder)
