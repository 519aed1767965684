"""Settings: flags, each also settable by an environment variable; a flag wins."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from server.cli import build_parser
from server.config import DEFAULT_PORT, Settings, settings_from


def settings(argv: list[str], environ: dict[str, str] | None = None) -> Settings:
    return settings_from(build_parser().parse_args(["serve", *argv]), environ or {})


def test_defaults() -> None:
    s = settings([])
    assert s.port == DEFAULT_PORT == 7700
    assert s.host == "127.0.0.1"
    assert s.engine == "sglang"
    assert s.device is None  # cuda where a GPU is present, else cpu
    assert s.model is None  # the embedded model
    assert s.node_name  # the host name
    assert s.max_request_bytes == 10 * 1024 * 1024
    assert s.tls is False


def test_environment_variables_set_every_flag() -> None:
    environ = {
        "B3OS_INFER_PORT": "8123",
        "B3OS_INFER_SERVED_MODEL_NAME": "team/model",
        "B3OS_INFER_CONTEXT_LENGTH": "4096",
        "B3OS_INFER_MEM_FRACTION_STATIC": "0.8",
        "B3OS_INFER_TP_SIZE": "2",
        "B3OS_INFER_CACHE_DIR": "/tmp/x",
    }
    s = settings([], environ)
    assert (s.port, s.served_model_name, s.context_length) == (8123, "team/model", 4096)
    assert (s.mem_fraction_static, s.tp_size, s.cache_dir) == (0.8, 2, Path("/tmp/x"))


def test_a_flag_wins_over_its_environment_variable() -> None:
    assert settings(["--port", "9000"], {"B3OS_INFER_PORT": "8123"}).port == 9000


def test_invalid_environment_value_is_a_clear_error() -> None:
    with pytest.raises(SystemExit, match="B3OS_INFER_PORT"):
        settings([], {"B3OS_INFER_PORT": "eighty"})


def test_certificate_and_key_go_together() -> None:
    with pytest.raises(SystemExit, match="--certfile and --keyfile"):
        settings(["--certfile", "cert.pem"])
    assert settings(["--certfile", "c.pem", "--keyfile", "k.pem"]).tls


@pytest.mark.parametrize("command", [["b3os-infer"], [sys.executable, "-m", "server"]])
def test_both_entry_points_take_serve(command: list[str]) -> None:
    executable = Path(sys.executable).parent / command[0] if command[0] == "b3os-infer" else None
    argv = [str(executable), *command[1:]] if executable else command
    result = subprocess.run([*argv, "serve", "--help"], capture_output=True, text=True, check=True)
    for flag in ("--port", "--engine", "--device", "--model", "--certfile", "--tp-size"):
        assert flag in result.stdout
    assert "B3OS_INFER_PORT" in result.stdout


@pytest.mark.parametrize(
    "argv",
    [["--engine", "vllm"], ["--device", "tpu"], ["--log-level", "loud"],
     ["--compat", "claude-code,aider"], ["--compat", "none,codex"]],
)  # fmt: skip
def test_unknown_choices_are_refused_at_start(argv: list[str]) -> None:
    with pytest.raises(SystemExit, match=argv[0]):
        settings(argv)


def test_the_configuration_doc_documents_every_flag() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    parser = build_parser()
    serve = parser._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    flags = [a.option_strings[0] for a in serve._actions if a.option_strings[0] != "-h"]
    assert flags
    assert [f for f in flags if f"`{f}`" not in doc] == []


def test_the_remote_engine_needs_its_url() -> None:
    with pytest.raises(SystemExit, match="--engine-url"):
        settings(["--engine", "sglang-remote"])
    with pytest.raises(SystemExit, match="http"):
        settings(["--engine", "sglang-remote", "--engine-url", "gpu1:30000"])
    s = settings(["--engine", "sglang-remote", "--engine-url", "http://gpu1:30000"])
    assert (s.engine_url, s.engine_timeout) == ("http://gpu1:30000", 600.0)


def test_sglang_server_takes_sglangs_port_and_passes_its_own_flags_through() -> None:
    args = build_parser().parse_args(["sglang-server", "--tp-size", "2", "--", "--foo", "1"])
    assert args.port is None  # main() puts SGLang's 30000 there unless B3OS_INFER_PORT is set
    assert args.sglang_args == ["--", "--foo", "1"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sglang-server", "--certfile", "x.pem"])  # not SGLang's


def test_sglang_server_arguments_become_sglangs_command_line() -> None:
    from server.engines.sglang.standalone import cli_args

    args = {"model_path": "/m", "tp_size": 2, "enable_metrics": True, "x": False, "y": None}
    assert cli_args(args) == ["--model-path", "/m", "--tp-size", "2", "--enable-metrics"]


def test_compat_takes_one_profile_or_several() -> None:
    both = settings(["--compat", "claude-code,codex"])
    assert both.compat_with("claude-code") and both.compat_with("codex")
    codex = settings(["--compat", "codex"])
    assert codex.compat_with("codex") and not codex.compat_with("claude-code")
    assert not settings([]).compat_with("codex")


def test_sampling_left_unset_follows_the_models_generation_config(tmp_path: Path) -> None:
    from server.config import default_cache_dir
    from server.models.card import sampling_defaults
    from server.models.embedded import ensure_converted

    (tmp_path / "generation_config.json").write_text(
        '{"temperature": 0.6, "top_k": 20, "do_sample": true, "max_new_tokens": 9}'
    )
    assert sampling_defaults(str(tmp_path)) == {"temperature": 0.6, "top_k": 20}
    assert sampling_defaults(str(tmp_path / "missing")) == {}
    embedded = ensure_converted(default_cache_dir())
    assert sampling_defaults(str(embedded)) == {"temperature": 0.2, "top_p": 0.9}


def test_the_default_answer_length_is_one_token_or_more() -> None:
    assert settings([]).default_max_tokens is None  # up to the window's end
    assert settings(["--default-max-tokens", "256"]).default_max_tokens == 256
    with pytest.raises(SystemExit, match="--default-max-tokens"):
        settings(["--default-max-tokens", "0"])


def test_the_answer_cap_is_one_token_or_more_and_holds_the_default() -> None:
    assert settings([]).max_output_tokens is None  # up to the window's end
    assert settings(["--max-output-tokens", "256"]).max_output_tokens == 256
    with pytest.raises(SystemExit, match="--max-output-tokens 0: give 1 or more"):
        settings(["--max-output-tokens", "0"])
    both = ["--default-max-tokens", "512", "--max-output-tokens", "256"]
    with pytest.raises(SystemExit, match="--default-max-tokens 512 is beyond --max-output-tokens"):
        settings(both)


def test_the_engine_registry_imports_nothing_of_the_server() -> None:
    """The settings read the engines' names from the registry at import; the registry's own
    imports of the settings, engines and models are for annotations only (no import circle)."""
    script = (
        "import sys, server.engines.registry; "
        "print(sorted(m for m in sys.modules if m.startswith('server')))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['server', 'server.engines', 'server.engines.registry']"
