"""Where keys, metering records and the request log are kept, and the one writer that fills them."""
