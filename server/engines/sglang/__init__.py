"""The in-process SGLang engine, with the compatibility pieces it needs on CPUs."""
