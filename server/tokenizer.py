"""The model's Hugging Face tokenizer, as transformers' AutoTokenizer gives it: the front tokenizes
every prompt itself and sends the engine token ids, so its tokenizer must be the engine's.

Where AutoTokenizer would give transformers' generic class (`TokenizersBackend`, what transformers
writes for a tokenizer with no class of its own: the embedded model's is), that class is loaded
directly. AutoTokenizer reads the model's config first, and that import takes torch: more than half
of a replay or remote front's start on a 2-core CPU (ready in 3.3 s against 7.5, back to back); the
generic class needs only `tokenizers`. Which folders those are is decided without torch too, from
the folder's own files and the table transformers keeps of the model types whose declared class it
replaces (read from its source: the module that holds it imports torch). SGLang's processes load
such a folder once through the same decision (engines/sglang/tokenizer_load.py)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any, cast

import orjson

from server.prompt import Tokenizer

GENERIC_TOKENIZER = "TokenizersBackend"
# Where transformers 5's AutoTokenizer keeps the model types whose declared tokenizer class it
# replaces by the type's own registered class: the module's file within the package (finding it
# by its module name imports the packages above it, 0.25 s of a front's start).
AUTO_TOKENIZER_SOURCE = Path("models", "auto", "tokenization_auto.py")
REPLACED_TYPES = "MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS"


def load_tokenizer(path: str) -> Tokenizer:
    """The tokenizer AutoTokenizer gives for the folder `path`, with its chat template (blocking:
    call in a thread); without torch where that is the generic class."""
    if autotokenizer_gives_generic(Path(path)):
        from transformers import TokenizersBackend

        return cast(Tokenizer, TokenizersBackend.from_pretrained(path))
    from server.torch_compat import ensure_torchvision_loadable

    ensure_torchvision_loadable()
    from transformers import AutoTokenizer

    return cast(Tokenizer, AutoTokenizer.from_pretrained(path))


def autotokenizer_gives_generic(folder: Path) -> bool:
    """AutoTokenizer gives the generic class for `folder`: the folder declares that class, with a
    tokenizer.json and no code of its own (`auto_map`), and its model (config.json's `model_type`
    and `model_name`) is of no type whose declared class transformers replaces. False where the
    table of those types cannot be read."""
    if not generic_tokenizer_folder(folder):
        return False
    replaced = replaced_model_types()
    if replaced is None:
        return False
    config = _json_object(folder / "config.json")
    return not {config.get("model_type"), config.get("model_name")} & replaced


def generic_tokenizer_folder(folder: Path) -> bool:
    """`folder` holds a tokenizer.json whose config names the generic class and no code of its
    own (`auto_map`)."""
    config = _json_object(folder / "tokenizer_config.json")
    return (
        config.get("tokenizer_class") == GENERIC_TOKENIZER
        and "auto_map" not in config
        and (folder / "tokenizer.json").is_file()
    )


def replaced_model_types() -> frozenset[str] | None:
    """The model types whose declared tokenizer class AutoTokenizer replaces, read from the
    installed transformers' source (a literal set); None if it holds no such set."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        return None
    try:
        tree = ast.parse((Path(spec.origin).parent / AUTO_TOKENIZER_SOURCE).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    for statement in tree.body:
        targets: list[ast.expr] = []
        if isinstance(statement, ast.AnnAssign):
            targets = [statement.target]
        elif isinstance(statement, ast.Assign):
            targets = statement.targets
        value = getattr(statement, "value", None)
        if value is not None and any(
            isinstance(target, ast.Name) and target.id == REPLACED_TYPES for target in targets
        ):
            try:
                types = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError):
                return None
            return frozenset(types) if isinstance(types, set) else None
    return None


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; empty where the file is missing, unreadable or not an object."""
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}
