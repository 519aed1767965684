"""The OpenAI Responses API (`POST /v1/infer/responses`) on the canonical model."""
