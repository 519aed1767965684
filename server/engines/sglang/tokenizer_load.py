"""SGLang's tokenizer loaded once, not three times, where AutoTokenizer gives transformers' generic
tokenizer class.

SGLang 0.5.23 loads a tokenizer with AutoTokenizer, and when that gives the generic
`TokenizersBackend` it loads it twice more in search of a class of the model's own: with
`use_fast=False`, then as the class `tokenizer_config.json` declares. For a folder that declares the
generic class itself (what transformers writes for a tokenizer with no class of its own: the
embedded model's folder) and for which AutoTokenizer keeps it (decided as the front decides it, in
`server/tokenizer.py`), both retries end on that same class. SGLang loads its tokenizer four times
a start (the main process, the detokenizer, the scheduler and its model worker), so a start paid
twelve loads for four tokenizers. Here such a folder is loaded as its declared class once, with
the arguments of SGLang's last load, and given SGLang's own post-load fixes, once a process: the
scheduler and its model worker, which load the same folder with the same arguments, share it. Any
other folder, mode or backend goes through SGLang's `get_tokenizer` unchanged: a call, and so a
start, takes less time and CPU."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

TARGET = "sglang.srt.utils.hf_transformers.tokenizer.get_tokenizer"


def load_generic_once(
    original: Callable[..., Any],
    tokenizer_name: str,
    *args: Any,
    tokenizer_mode: str = "auto",
    trust_remote_code: bool = False,
    tokenizer_revision: str | None = None,
    tokenizer_backend: str = "huggingface",
    **kwargs: Any,
) -> Any:
    """An AROUND hook on SGLang's `get_tokenizer`: one load where AutoTokenizer would give the
    generic class, SGLang's own function for anything else."""
    from server.tokenizer import autotokenizer_gives_generic

    # As SGLang's managers call it: no argument that could change AutoTokenizer's choice.
    ordinary = (
        not args
        and kwargs.keys() <= {"revision"}
        and tokenizer_mode == "auto"
        and tokenizer_backend == "huggingface"
    )
    if not (ordinary and autotokenizer_gives_generic(Path(tokenizer_name))):
        return original(
            tokenizer_name,
            *args,
            tokenizer_mode=tokenizer_mode,
            trust_remote_code=trust_remote_code,
            tokenizer_revision=tokenizer_revision,
            tokenizer_backend=tokenizer_backend,
            **kwargs,
        )
    return _generic(tokenizer_name, trust_remote_code, tokenizer_revision, tuple(kwargs.items()))


@functools.lru_cache(maxsize=4)
def _generic(
    tokenizer_name: str,
    trust_remote_code: bool,
    tokenizer_revision: str | None,
    kwargs: tuple[tuple[str, Any], ...],  # SGLang's `revision`, where it passes one
) -> Any:
    from sglang.srt.utils.hf_transformers import tokenizer as sglang_tokenizer
    from transformers import TokenizersBackend

    # The arguments of SGLang's last load, as the declared class, which its result holds.
    tokenizer = TokenizersBackend.from_pretrained(
        tokenizer_name,
        trust_remote_code=trust_remote_code,
        tokenizer_revision=tokenizer_revision,
        clean_up_tokenization_spaces=False,
        **{**dict(kwargs), "use_fast": False},
    )
    return sglang_tokenizer._apply_post_load_fixes(tokenizer, tokenizer_name, tokenizer_revision)
