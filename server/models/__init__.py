"""Which model this node serves: resolving `--model`, the embedded default, and the model card."""
