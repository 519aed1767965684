"""What the SGLang engine is built against, checked at start: the SGLang release everywhere, the
torch release where the CPU path runs (its stand-in kernels and replacements rest on that build's
ops), and every replacement of the plugin applied in SGLang. SGLang logs a hook that fails to
apply and serves on, half-patched; a node here refuses to start instead, naming what differs."""

from __future__ import annotations

from importlib import metadata

from server.models.embedded import ModelSetupError

SGLANG = "0.5.23"
TORCH_ON_CPU = "2.13.0"


def release(distribution: str) -> str | None:
    """The installed release of `distribution`, its local part (`+cpu`) left out."""
    try:
        return metadata.version(distribution).split("+", 1)[0]
    except metadata.PackageNotFoundError:
        return None


def check_versions(device: str) -> None:
    """Before SGLang is imported."""
    found = {"sglang": release("sglang"), "torch": release("torch")}
    wanted = {"sglang": SGLANG} | ({"torch": TORCH_ON_CPU} if device == "cpu" else {})
    differ = [
        f"{name} {found[name] or 'is not installed'}"
        + (f" is installed, where this node is built on {version}" if found[name] else "")
        for name, version in wanted.items()
        if found[name] != version
    ]
    if differ:
        raise ModelSetupError(f"{'; '.join(differ)} (make install sets up the pinned ones)")


def check_hooks() -> None:
    """After SGLang has loaded its plugins in this process (`load_plugins`)."""
    from server.engines.sglang import plugin

    missing = plugin.unapplied(plugin.on_cpu())
    if missing:
        raise ModelSetupError(
            f"SGLang {release('sglang')} did not take this node's replacements of "
            f"{', '.join(missing)} (see the log above for why); the node serves none half-patched"
        )
