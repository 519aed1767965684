"""The Anthropic Messages protocol."""
