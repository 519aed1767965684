"""A second real server, started with settings the session server does not use
(tests/api/conftest.py): TLS (HTTP/2 or HTTP/1.1 chosen by ALPN), the model given as a folder
with its own served name, and `--system-in-messages keep`. Also what it answers while its engine
is still starting."""

from __future__ import annotations

import re
import signal
import ssl
import time

import anthropic
import httpx
import httpx2
import openai
import psutil
import pytest

from bench.scenarios import startup
from server.engines.sglang import forkserver
from tests.api.conftest import Starting
from tests.api.contract import whole_prompt
from tests.api.conventions import assert_ids
from tests.server_process import ServerProcess, ignored_signals

HELLO = [{"role": "user", "content": "Say hello."}]


def test_alpn_chooses_http2(
    tls_server: ServerProcess, trust: ssl.SSLContext, tls_model: str
) -> None:
    body = {"model": tls_model, "max_tokens": 4, "messages": HELLO}
    with httpx.Client(base_url=tls_server.origin, verify=trust, http2=True, timeout=120) as client:
        response = client.post("/v1/infer/chat/completions", json=body)
    assert response.http_version == "HTTP/2"
    assert response.status_code == 200
    assert_ids(response)


def test_http1_over_tls(tls_server: ServerProcess, trust: ssl.SSLContext, tls_model: str) -> None:
    body = {"model": tls_model, "max_tokens": 4, "messages": HELLO}
    with httpx.Client(base_url=tls_server.origin, verify=trust, timeout=120) as client:
        response = client.post("/v1/infer/v1/messages", json=body)
    assert response.http_version == "HTTP/1.1"
    assert response.status_code == 200


def test_sdks_stream_over_tls_with_http2(
    tls_server: ServerProcess, trust: ssl.SSLContext, tls_model: str
) -> None:
    # The Anthropic SDK 2.x runs on httpx2 (a fork of httpx), the OpenAI SDK on httpx.
    with httpx2.Client(verify=trust, http2=True, timeout=120) as transport:
        claude = anthropic.Anthropic(
            base_url=tls_server.base_url, auth_token="x", http_client=transport, max_retries=0
        )
        with claude.messages.stream(model=tls_model, max_tokens=6, messages=HELLO) as stream:
            text = "".join(stream.text_stream)
            assert stream.get_final_message().content[0].text == text
    with httpx.Client(verify=trust, http2=True, timeout=120) as transport:
        gpt = openai.OpenAI(
            base_url=tls_server.base_url, api_key="x", http_client=transport, max_retries=0
        )
        completion = gpt.chat.completions.create(
            model=tls_model, max_tokens=6, messages=HELLO, stream=True
        )
        chunks = list(completion)
    assert chunks[-1].choices[0].finish_reason in {"stop", "length"}


def test_infer_routes_answer_503_with_retry_after_while_the_engine_starts(
    tls_server: ServerProcess, starting: Starting
) -> None:
    infer, ready = starting.infer, starting.ready
    assert infer is not None
    assert ready is not None
    assert infer.status_code == 503
    assert int(infer.headers["retry-after"]) > 0
    assert infer.json()["error"]["code"] == "infer_backend_unavailable"
    assert ready.status_code == 503
    assert ready.json() == {"status": "starting"}


def test_keep_renders_a_system_message_where_it_stands(
    tls_server: ServerProcess, trust: ssl.SSLContext, tls_model: str
) -> None:
    conversation = [
        {"role": "user", "content": "Hi."},
        {"role": "system", "content": "Answer in French from now on."},
        {"role": "user", "content": "How are you?"},
    ]
    body = {"model": tls_model, "max_tokens": 2, "messages": conversation}
    with httpx.Client(base_url=tls_server.origin, verify=trust, timeout=120) as client:
        answer = client.post("/v1/infer/v1/messages", json=body)
        moved = client.post(
            "/v1/infer/v1/messages/count_tokens",
            json={
                "model": tls_model,
                "system": "Answer in French from now on.",
                "messages": [conversation[0], conversation[2]],
            },
        )
    assert answer.status_code == 200, answer.text
    # Rendered in place, not moved to the top: the prompt differs from the moved one.
    assert whole_prompt(answer.json()["usage"]) != moved.json()["input_tokens"]


def test_the_start_log_says_what_an_operator_needs(
    tls_server: ServerProcess, trust: ssl.SSLContext
) -> None:
    """SGLang's notices that ask nothing of the operator (its list of model modules that do not
    import on this machine, AMX and CUDA absent, ...) and its plugins' load stay at debug level,
    its loader says nothing of the blocks the node loads itself, and the probes (a readiness
    check every second) leave no access line where a request does."""
    with httpx.Client(base_url=tls_server.origin, verify=trust, timeout=30) as client:
        assert client.get("/readyz").status_code == 200
        assert client.get("/metrics").status_code == 200
        assert client.get("/v1/infer/models").status_code == 200
    deadline = time.monotonic() + 10
    log = tls_server.log_text()
    while '"GET /v1/infer/models' not in log and time.monotonic() < deadline:
        time.sleep(0.05)  # the access line is written once the answer has gone
        log = tls_server.log_text()
    assert "SGLang ready: context" in log
    assert "Ignore import error" not in log
    assert re.findall(r"^\[\d{4}-\d\d-\d\d [\d:]+\] .*", log, re.MULTILINE) == []  # SGLang's
    assert "sglang.srt.plugins" not in log
    assert "not found in params_dict" not in log
    assert "/readyz" not in log and "GET /metrics" not in log
    # `python -m bench startup` times a start between these lines: each is there, in order.
    found = {step: re.search(pattern, log) for step, pattern in startup.STEPS}
    assert all(found.values()), [step for step, match in found.items() if match is None]
    starts = [match.start() for match in found.values() if match is not None]
    assert starts == sorted(starts)


def test_sglangs_processes_fork_from_a_forkserver_that_imported_them(
    tls_server: ServerProcess,
) -> None:
    """On a CPU, SGLang's scheduler and detokenizer are children of the node's forkserver, which
    imported their modules and loaded SGLang's plugins (its title says so once it has), rather
    than fresh interpreters importing SGLang again; like SGLang's own processes, they leave a
    terminal's Ctrl-C to the node."""
    processes = psutil.Process(tls_server.pid).children(recursive=True)
    sglangs = [process for process in processes if process.name().startswith("sglang::")]
    names = sorted(process.name() for process in sglangs)
    assert names == ["sglang::detokenizer", "sglang::scheduler"]
    sigint = 1 << (signal.SIGINT - 1)
    for process in sglangs:
        assert process.parent().cmdline()[0] == forkserver.TITLE, process.parent().cmdline()
        assert ignored_signals(process.pid) & sigint, process
    assert not ignored_signals(tls_server.pid) & sigint  # the node stops on it


def test_a_context_length_beyond_the_models_window_is_one_clear_line(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    process = ServerProcess(
        tmp_path_factory.mktemp("too-wide") / "server.log", "--context-length", "100000"
    )
    log = refused(process)
    assert (
        "cannot start: --context-length 100000 is beyond the model's window of 32768 tokens; "
        "give at most 32768, or leave it unset to serve the whole window"
    ) in log
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" not in log


def refused(process: ServerProcess) -> str:
    """The log of a node that exits 1 at start, its reason one line rather than a traceback, and
    its engine never ready."""
    process.start()
    assert process.wait_exit(timeout=120) == 1
    log = process.log_text()
    assert "Traceback" not in log and "SGLang ready" not in log
    return log


def test_an_sglang_other_than_the_pinned_one_is_refused_at_start(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Installed metadata saying another SGLang release (ahead on the path) stops the node before
    its engine starts: the CPU path replaces SGLang's pieces of 0.5.23 by name."""
    folder = tmp_path_factory.mktemp("other-sglang")
    info = folder / "sglang-0.5.22.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.22\n")
    log = refused(ServerProcess(folder / "server.log", env={"PYTHONPATH": str(folder)}))
    assert (
        "cannot start: sglang 0.5.22 is installed, where this node is built on 0.5.23 "
        "(make install sets up the pinned ones)"
    ) in log
    assert "server.engines.sglang.cpu_compat" not in log  # refused before the forkserver's start


def test_a_node_whose_replacements_did_not_apply_is_refused_at_start(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """SGLang's own plugin whitelist leaving this node's plugin out: SGLang would serve
    unpatched; the node names every replacement missing and does not start."""
    folder = tmp_path_factory.mktemp("unpatched")
    log = refused(ServerProcess(folder / "server.log", env={"SGLANG_PLUGINS": "another_plugin"}))
    assert "cannot start: SGLang 0.5.23 did not take this node's replacements of " in log
    for target in (
        "sglang.srt.layers.sampler.top_k_top_p_min_p_sampling_from_probs_torch",
        "sglang.srt.utils.hf_transformers.tokenizer.get_tokenizer",
        "sglang.srt.arg_groups.overrides.supports_mamba_cache_extra_buffer",  # a CPU's
        "the torch_native attention backend",  # the CPU path's, in SGLang's attention registry
    ):
        assert target in log
