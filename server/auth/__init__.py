"""API keys: their format and checksum, the key store, and authenticating a request."""
