"""Prompt rendering: canonical messages through the model's own chat template into token ids, in
this process, so counts are exact before the engine runs (count_tokens, context checks, usage)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, cast

from server.canonical import GenerateRequest, Message


class Tokenizer(Protocol):
    """The part of a Hugging Face tokenizer the renderer uses."""

    def apply_chat_template(self, conversation: list[dict[str, Any]], **kwargs: Any) -> Any: ...

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: list[int], **kwargs: Any) -> str: ...


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    ids: list[int]

    @property
    def num_tokens(self) -> int:
        return len(self.ids)


class PromptRenderer:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer

    def render(self, request: GenerateRequest) -> Prompt:
        """A trailing assistant turn is left open: the answer continues where it ends."""
        continues = request.continues_answer
        text = self._tokenizer.apply_chat_template(
            [_template_message(m) for m in request.messages],
            tokenize=False,
            add_generation_prompt=not continues,
            continue_final_message=continues,
        )
        return Prompt(text, self._tokenizer.encode(text, add_special_tokens=False))


def _template_message(message: Message) -> dict[str, Any]:
    return {"role": message.role, "content": message.text}


def load_tokenizer(path: str) -> Tokenizer:
    """The model's Hugging Face tokenizer, with its chat template (blocking: call in a thread)."""
    from server.torch_compat import ensure_torchvision_loadable

    ensure_torchvision_loadable()
    from transformers import AutoTokenizer

    return cast(Tokenizer, AutoTokenizer.from_pretrained(path))
