"""The OpenAI Chat Completions protocol."""
