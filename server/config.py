"""Settings of a server process: one frozen dataclass, filled from flags, each also settable by an
environment variable (`--served-model-name` is `B3OS_INFER_SERVED_MODEL_NAME`; a flag wins)."""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from server.engines.registry import ENGINES

ENV_PREFIX = "B3OS_INFER_"
DEFAULT_PORT = 7700
DEFAULT_MAX_REQUEST_BYTES = 10 * 1024 * 1024
DEFAULT_ENGINE_TIMEOUT_S = 600.0
DEFAULT_MAX_QUEUE_WAIT_S = 120.0
DEFAULT_GATEWAY_TIMEOUT_S = 120.0
DEFAULT_RESPONSE_STORE_MB = 256.0
DEFAULT_RESPONSE_STORE_DAYS = 30.0
DEVICES = ("cuda", "cpu")
LOG_LEVELS = ("debug", "info", "warning", "error")
SYSTEM_IN_MESSAGES = ("refuse", "keep")
COMPAT = ("none", "claude-code", "codex")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "b3os-infer"


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    engine: str = "sglang"
    engine_url: str | None = None  # sglang-remote: SGLang's HTTP server, or sglang-router
    # sglang-remote: the remote's --api-key, if it has one (kept out of the settings' repr)
    engine_api_key: str | None = field(default=None, repr=False)
    engine_timeout: float = DEFAULT_ENGINE_TIMEOUT_S
    replay_hold_after: int | None = None  # replay: pieces of each answer before it holds (tests)
    device: str | None = None  # None: cuda where a GPU is present, else cpu
    model: str | None = None  # None: the embedded SmolLM2-135M-Instruct
    served_model_name: str | None = None
    context_length: int | None = None
    # The most tokens of an answer whose request names no maximum; None: up to the window's end.
    default_max_tokens: int | None = None
    # The most tokens of any answer, whatever its request names; None: the window's end.
    max_output_tokens: int | None = None
    node_name: str = ""
    certfile: str | None = None
    keyfile: str | None = None
    log_level: str = "info"
    cache_dir: Path = Path()
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    body_timeout: float = 60.0  # seconds to receive a whole request body (slow senders: 408)
    keep_alive_timeout: float = 5.0  # seconds an idle connection is kept open
    h2_max_streams: int = 100  # concurrent requests on one HTTP/2 connection
    stream_stall_timeout: float = 60.0  # a stream whose client takes nothing this long is cut
    # SGLang options that matter on a GPU; None keeps SGLang's own default.
    mem_fraction_static: float | None = None
    tp_size: int = 1
    max_running_requests: int | None = None
    max_total_tokens: int | None = None  # None: SGLang's sizing on a GPU, 65536 on a CPU
    system_in_messages: str = "refuse"  # refuse | keep (Messages: a system turn inside messages)
    # none, or profiles joined by commas (claude-code, codex): what agents send beyond the contract
    compat: str = "none"
    db: Path | None = None  # the key and metering store; None: the node runs open
    limits: Path | None = None  # the limits file; None: the defaults
    max_queue_wait: float = DEFAULT_MAX_QUEUE_WAIT_S  # 0: no bound
    # Responses kept (`store`): in --db, else in memory; the oldest dropped past either bound.
    response_store_mb: float = DEFAULT_RESPONSE_STORE_MB
    response_store_days: float = DEFAULT_RESPONSE_STORE_DAYS
    # SGLang's deterministic inference, so seeds take effect. None: on in this process; with
    # sglang-remote, as the remote's workers run (off where that cannot be learned).
    deterministic_sampling: bool | None = None
    # The B3IQ gateway route of chat completions (`route: gateway`); None: not set up (503).
    gateway_url: str | None = None  # its OpenAI-compatible base URL (+ /chat/completions)
    gateway_api_key: str | None = field(default=None, repr=False)  # never logged or echoed
    gateway_models: tuple[str, ...] = ()  # the models it may be asked for; empty: any
    gateway_timeout: float = DEFAULT_GATEWAY_TIMEOUT_S  # for each of the upstream's reads
    gateway_connect_timeout: float = 5.0

    def compat_with(self, profile: str) -> bool:
        """Whether `--compat` names this profile (claude-code, codex)."""
        return profile in self.compat.split(",")

    @property
    def tls(self) -> bool:
        return self.certfile is not None


def _on_off(text: str) -> bool:
    if text.lower() in ("on", "true", "1", "yes"):
        return True
    if text.lower() in ("off", "false", "0", "no"):
        return False
    raise ValueError(text)


@dataclass(frozen=True, slots=True)
class _Option:
    field: str
    help: str
    parse: Callable[[str], Any] = str


_OPTIONS = (
    _Option("host", "address to bind (default 127.0.0.1; 0.0.0.0 for every interface)"),
    _Option("port", f"port to bind (default {DEFAULT_PORT})", int),
    _Option(
        "engine",
        "model runtime: sglang (in-process, the default), sglang-remote (SGLang's HTTP server or "
        "router at --engine-url), or replay (no model: a bench tool)",
    ),
    _Option("engine_url", "sglang-remote: base URL of SGLang's server or sglang-router"),
    _Option("engine_api_key", "sglang-remote: the API key the remote was started with"),
    _Option(
        "engine_timeout",
        "sglang-remote: seconds a request may wait for the remote's next output "
        f"(default {DEFAULT_ENGINE_TIMEOUT_S:.0f})",
        float,
    ),
    _Option(
        "replay_hold_after",
        "replay: each answer holds after this many pieces until its client goes away (tests "
        "that stop a server at a known point of a stream; default: no hold)",
        int,
    ),
    _Option("device", "cuda or cpu (default: cuda where a GPU is present, else cpu)"),
    _Option("model", "HF model folder or id (default: the embedded SmolLM2-135M-Instruct)"),
    _Option("served_model_name", "model id clients send and /v1/infer/models lists"),
    _Option(
        "context_length",
        "context window in tokens (default: the model's; with sglang-remote, the workers', and "
        "this where they cannot be asked: at most theirs)",
        int,
    ),
    _Option(
        "default_max_tokens",
        "the most tokens of an answer whose request names no maximum (Chat Completions without "
        "max_tokens, Responses without max_output_tokens; Messages requires one) (default: up "
        "to the end of the context window)",
        int,
    ),
    _Option(
        "max_output_tokens",
        "the most tokens of any answer: a request naming more (or none) is answered up to it, "
        "its answer then ending as at its own maximum (default: the end of the context window)",
        int,
    ),
    _Option("node_name", "node name in the b3os extension (default: the host name)"),
    _Option("certfile", "TLS certificate (PEM); serves HTTP/2 and HTTP/1.1 over TLS via ALPN"),
    _Option("keyfile", "TLS private key (PEM)"),
    _Option("log_level", "debug, info, warning or error (default info)"),
    _Option("cache_dir", "where converted models are kept (default ~/.cache/b3os-infer)", Path),
    _Option("max_request_bytes", "largest request body accepted (default 10 MiB)", int),
    _Option(
        "body_timeout",
        "seconds to receive a whole request body; a slower one is refused with 408 (default 60)",
        float,
    ),
    _Option(
        "keep_alive_timeout", "seconds an idle client connection is kept open (default 5)", float
    ),
    _Option("h2_max_streams", "concurrent requests on one HTTP/2 connection (default 100)", int),
    _Option(
        "stream_stall_timeout",
        "seconds a stream's client may take nothing before the stream and its generation are "
        "cut (default 60; 0: never)",
        float,
    ),
    _Option(
        "mem_fraction_static", "SGLang: fraction of GPU memory for weights and KV cache", float
    ),
    _Option("tp_size", "SGLang: tensor parallel size (GPUs per model replica)", int),
    _Option("max_running_requests", "SGLang: most requests decoded at once", int),
    _Option("max_total_tokens", "SGLang: KV cache size in tokens (default on a CPU: 65536)", int),
    _Option(
        "db",
        "the key and metering store (SQLite), shared with `b3os-infer keys` and `usage` "
        "(default: none, and the node runs open: no keys, nothing metered)",
        Path,
    ),
    _Option("limits", "the limits file (TOML; default: the built-in limits)", Path),
    _Option(
        "deterministic_sampling",
        "on: SGLang's deterministic inference, so a request's seed repeats its answer (on a "
        "GPU it costs throughput); off: requests with a seed are refused (default on; with "
        "sglang-remote, as the remote's workers run, and a start-time check that they do)",
        _on_off,
    ),
    _Option(
        "max_queue_wait",
        "seconds a request may wait in the model runtime's queue before it is dropped "
        "unstarted and refused with 503 (its own prefill does not count); with sglang-remote, "
        "the workers' own bound applies (b3os-infer sglang-server --max-queue-wait); 0: no "
        f"bound (default {DEFAULT_MAX_QUEUE_WAIT_S:.0f})",
        float,
    ),
    _Option(
        "response_store_mb",
        "the Responses API's stored responses (store, the default): at most this many MiB, the "
        f"oldest dropped first; kept in --db, else in memory (default {DEFAULT_RESPONSE_STORE_MB})",
        float,
    ),
    _Option(
        "response_store_days",
        "stored responses are dropped after this many days "
        f"(default {DEFAULT_RESPONSE_STORE_DAYS:g})",
        float,
    ),
    _Option(
        "system_in_messages",
        "Messages: a system turn inside messages is refused (refuse, the default) or rendered "
        "where it stands (keep), where the model's chat format allows",
    ),
    _Option(
        "gateway_url",
        "the B3IQ gateway's OpenAI-compatible base URL (/chat/completions is appended), where "
        'chat completions with "route": "gateway" for models this node does not serve go '
        "(default: none, and such requests are 503)",
    ),
    _Option("gateway_api_key", "the node's API key at the gateway (never logged or echoed)"),
    _Option(
        "gateway_models",
        "comma-separated models the gateway may be asked for, listed by /v1/infer/models "
        "(default: any, none listed)",
        lambda text: tuple(name.strip() for name in text.split(",") if name.strip()),
    ),
    _Option(
        "gateway_timeout",
        "seconds the gateway may take for each part of its answer: its first token, each "
        f"next one (default {DEFAULT_GATEWAY_TIMEOUT_S:.0f})",
        float,
    ),
    _Option("gateway_connect_timeout", "seconds to connect to the gateway (default 5)", float),
    _Option(
        "compat",
        "none (the default): the contract exactly; claude-code: also what Claude Code sends "
        "beyond it (tool search: defer_loading and tool_reference; safeguards), with "
        "--system-in-messages keep; codex: the Responses API leaves out OpenAI's hosted tools "
        "(web_search, ...) that Codex sends, instead of refusing them; both: claude-code,codex",
    ),
)


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def add_arguments(
    parser: argparse.ArgumentParser, only: Collection[str] | None = None, **defaults: str
) -> None:
    """The flags of `only` the settings named (all by default); `defaults` replaces the default
    a flag's help names."""
    for option in _OPTIONS:
        if only is not None and option.field not in only:
            continue
        help_text = option.help
        if option.field in defaults:
            help_text = help_text.split(" (default")[0] + f" (default {defaults[option.field]})"
        parser.add_argument(
            "--" + option.field.replace("_", "-"),
            dest=option.field,
            type=option.parse,
            default=None,
            help=f"{help_text} [env {env_name(option.field)}]",
        )


def settings_from(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Settings:
    """Flags first, then environment variables, then the defaults above."""
    values: dict[str, Any] = {}
    for option in _OPTIONS:
        value = getattr(args, option.field, None)
        if value is None and env_name(option.field) in environ:
            raw = environ[env_name(option.field)]
            try:
                value = option.parse(raw)
            except ValueError:
                raise SystemExit(f"{env_name(option.field)}={raw!r} is not valid") from None
        if value is not None:
            values[option.field] = value
    values.setdefault("cache_dir", default_cache_dir())
    values.setdefault("node_name", socket.gethostname())
    known = {f.name for f in fields(Settings)}
    settings = Settings(**{k: v for k, v in values.items() if k in known})
    _check(settings)
    return settings


def _check(settings: Settings) -> None:
    if (settings.certfile is None) != (settings.keyfile is None):
        raise SystemExit("--certfile and --keyfile go together")
    if settings.engine == "sglang-remote" and not settings.engine_url:
        raise SystemExit("--engine sglang-remote needs --engine-url (SGLang's server or router)")
    if settings.engine_url and not settings.engine_url.startswith(("http://", "https://")):
        raise SystemExit(f"--engine-url {settings.engine_url!r}: give an http:// or https:// URL")
    if settings.gateway_url and not settings.gateway_url.startswith(("http://", "https://")):
        raise SystemExit(f"--gateway-url {settings.gateway_url!r}: give an http:// or https:// URL")
    if (settings.gateway_models or settings.gateway_api_key) and not settings.gateway_url:
        raise SystemExit("--gateway-models and --gateway-api-key need --gateway-url")
    for name, tokens in (
        ("--default-max-tokens", settings.default_max_tokens),
        ("--max-output-tokens", settings.max_output_tokens),
    ):
        if tokens is not None and tokens < 1:
            raise SystemExit(f"{name} {tokens}: give 1 or more")
    default, cap = settings.default_max_tokens, settings.max_output_tokens
    if default is not None and cap is not None and default > cap:
        raise SystemExit(
            f"--default-max-tokens {default} is beyond --max-output-tokens {cap}: give at most that"
        )
    for name, value, choices in (
        ("--engine", settings.engine, tuple(ENGINES)),
        ("--device", settings.device, DEVICES),
        ("--log-level", settings.log_level, LOG_LEVELS),
        ("--system-in-messages", settings.system_in_messages, SYSTEM_IN_MESSAGES),
    ):
        if value is not None and value not in choices:
            raise SystemExit(f"{name} {value!r}: choose one of {', '.join(choices)}")
    profiles = settings.compat.split(",")
    for profile in profiles:
        if profile not in COMPAT or (profile == "none" and len(profiles) > 1):
            raise SystemExit(
                f"--compat {settings.compat!r}: choose none, or one or more of "
                f"{', '.join(COMPAT[1:])} joined by commas"
            )
