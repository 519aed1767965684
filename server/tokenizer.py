"""The model's Hugging Face tokenizer, as transformers' AutoTokenizer gives it: the front tokenizes
every prompt itself and sends the engine token ids, so its tokenizer must be the engine's.

Where AutoTokenizer would give transformers' generic class (`TokenizersBackend`, what transformers
writes for a tokenizer with no class of its own: the embedded model's is), that class is loaded
directly. AutoTokenizer reads the model's config first, and that import takes torch, which a
replay or remote front would otherwise never import (it is most of such a front's start); the
generic class needs only `tokenizers`. Which folders those are is decided without torch
too, from the folder's own files and the table transformers keeps of the model types whose
declared class it replaces (read from its source: the module that holds it imports torch).
SGLang's processes load such a folder once through the same decision
(engines/sglang/tokenizer_load.py)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import orjson

GENERIC_TOKENIZER = "TokenizersBackend"
# A Mistral tokenizer's own vocabulary: with mistral_common installed (SGLang requires it),
# AutoTokenizer gives MistralCommonBackend for a Mistral-family folder that holds one.
MISTRAL_VOCABULARY = "tekken.json"
# Where transformers 5's AutoTokenizer keeps the model types whose declared tokenizer class it
# replaces by the type's own registered class: the module, its file within the package (finding
# it by its module name imports the packages above it, several times the cost of reading the
# file), and the name of the set there.
AUTO_TOKENIZER_MODULE = "transformers.models.auto.tokenization_auto"
AUTO_TOKENIZER_SOURCE = Path("models", "auto", "tokenization_auto.py")
REPLACED_TYPES_NAME = "MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS"
SET_MUTATORS = frozenset(
    {"add", "update", "discard", "remove", "pop", "clear", "difference_update",
     "intersection_update", "symmetric_difference_update"}
)  # fmt: skip


class Tokenizer(Protocol):
    """The part of a Hugging Face tokenizer the renderer uses."""

    chat_template: str | None

    def apply_chat_template(self, conversation: list[dict[str, Any]], **kwargs: Any) -> Any: ...

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: list[int], **kwargs: Any) -> str: ...

    def get_vocab(self) -> dict[str, int]: ...

    def get_added_vocab(self) -> dict[str, int]: ...


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    ids: list[int]
    opened: bool = False  # it ends inside the answer's reasoning (the template opened it)

    @property
    def num_tokens(self) -> int:
        return len(self.ids)


class TokenBytes:
    """A token's exact bytes, for logprobs: from a byte-level BPE vocabulary (GPT-2's byte to
    character table, reversed), else from decoding the token alone. Memoized per token id."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        decoder = type(getattr(backend, "decoder", None)).__name__
        self._byte_level = decoder == "ByteLevel" and hasattr(tokenizer, "convert_ids_to_tokens")
        self._known: dict[int, bytes] = {}

    def __call__(self, token_id: int) -> bytes:
        found = self._known.get(token_id)
        if found is None:
            found = self._known[token_id] = self._bytes(token_id)
        return found

    def _bytes(self, token_id: int) -> bytes:
        if self._byte_level:
            piece = getattr(self._tokenizer, "convert_ids_to_tokens")(token_id)  # noqa: B009
            if isinstance(piece, str) and all(char in _BYTE_OF for char in piece):
                return bytes(_BYTE_OF[char] for char in piece)
        return self._tokenizer.decode([token_id]).encode()


def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte-level alphabet: each byte as a printable character, reversed."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in chars:
            chars[byte] = chr(256 + extra)
            extra += 1
    return {char: byte for byte, char in chars.items()}


_BYTE_OF = _byte_of_char()  # a constant table


def load_tokenizer(path: str) -> Tokenizer:
    """The tokenizer AutoTokenizer gives for `path` (a folder or a model id), with its chat
    template (blocking: call in a thread); without torch where that is the generic class."""
    if autotokenizer_gives_generic(Path(path)):
        from transformers import TokenizersBackend

        return cast(Tokenizer, TokenizersBackend.from_pretrained(path))
    from server.torch_compat import ensure_torchvision_loadable

    ensure_torchvision_loadable()
    from transformers import AutoTokenizer

    return cast(Tokenizer, AutoTokenizer.from_pretrained(path))


def autotokenizer_gives_generic(folder: Path) -> bool:
    """AutoTokenizer, given `folder` alone, gives the generic class: the folder declares that
    class, with a tokenizer.json, no code of its own (`auto_map`) and no Mistral vocabulary, and its
    config.json (if any) names no model type or model name whose declared class transformers
    replaces. False where any of that cannot be told (an unreadable config, the table of those
    types not found): AutoTokenizer then decides."""
    if not _declares_generic(folder) or (folder / MISTRAL_VOCABULARY).exists():
        return False
    config = _json_object(folder / "config.json") if (folder / "config.json").exists() else {}
    replaced = replaced_model_types()
    if config is None or replaced is None:
        return False
    names = (config.get("model_type"), config.get("model_name"))
    return all(isinstance(name, str | None) and name not in replaced for name in names)


def replaced_model_types() -> frozenset[str] | None:
    """The model types whose declared tokenizer class AutoTokenizer replaces: the set itself
    where transformers' module is already imported (SGLang's processes), else read from its
    source, where it must be a literal bound once and never changed; None if neither holds."""
    imported = sys.modules.get(AUTO_TOKENIZER_MODULE)
    if imported is not None:
        value = getattr(imported, REPLACED_TYPES_NAME, None)
        return frozenset(value) if isinstance(value, set | frozenset) else None
    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        return None
    try:
        tree = ast.parse((Path(spec.origin).parent / AUTO_TOKENIZER_SOURCE).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    bound: list[ast.AST | None] = []  # what each binding of the name binds it to
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == REPLACED_TYPES_NAME for t in targets):
                bound.append(node if isinstance(node, ast.AugAssign) else node.value)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == REPLACED_TYPES_NAME
            and node.attr in SET_MUTATORS
        ):
            return None
    if len(bound) != 1 or not isinstance(bound[0], ast.Set):
        return None
    try:
        types = ast.literal_eval(bound[0])
    except (ValueError, TypeError, SyntaxError):
        return None
    return frozenset(types)


def _declares_generic(folder: Path) -> bool:
    """`folder` holds a tokenizer.json whose config names the generic class and no code of its
    own (`auto_map`)."""
    config = _json_object(folder / "tokenizer_config.json") or {}
    return (
        config.get("tokenizer_class") == GENERIC_TOKENIZER
        and "auto_map" not in config
        and (folder / "tokenizer.json").is_file()
    )


def _json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`; None where the file is missing, unreadable or not an object."""
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None
