"""b3os-infer: the Anthropic Messages and OpenAI Chat Completions APIs on SGLang."""

__version__ = "0.1.0"
