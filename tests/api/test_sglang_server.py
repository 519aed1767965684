"""`b3os-infer sglang-server`'s processes (SGLang's scheduler and detokenizer, and
multiprocessing's resource tracker) leave a terminal's Ctrl-C (SIGINT to the process group) to
the server, which stops them: none dies of it with its own KeyboardInterrupt traceback."""

from __future__ import annotations

import signal

import httpx
import psutil
import pytest

from tests.server_process import ServerProcess, ignored_signals

# On the session's SGLang server, with the remote engine's tests: it stops after the last of them.
pytestmark = [pytest.mark.remote_only, pytest.mark.usefixtures("with_the_remote_engines_tests")]


def test_sglangs_processes_leave_sigint_to_the_server(sglang_server: ServerProcess) -> None:
    processes = psutil.Process(sglang_server.pid).children()
    assert len(processes) >= 2, processes  # at least the scheduler and the detokenizer
    sigint = 1 << (signal.SIGINT - 1)
    for process in processes:
        assert ignored_signals(process.pid) & sigint, process
    assert not ignored_signals(sglang_server.pid) & sigint  # the server stops on it


def test_each_decoded_tokens_logprob_is_the_one_sglangs_own_forward_gives(
    sglang_server: ServerProcess,
) -> None:
    """A greedy answer decoded a token at a time (server/engines/sglang/cpu/decode.py, the lean
    decode step), then the same tokens prefilled as a prompt (SGLang's own `LlamaModel.forward`):
    each token's logprob agrees. The paths differ in rounding only (a prefill's products run on
    fp32 activations, a decode step's on bf16: about 0.05 nats apart); a misplaced residual,
    norm or rotation would decode tokens the model itself gives whole nats less."""
    with httpx.Client(base_url=sglang_server.origin, timeout=300) as client:
        prompt = client.post("/tokenize", json={"prompt": "The sea at night is"}).json()["tokens"]
        greedy = {"temperature": 0, "ignore_eos": True}
        answer = client.post("/generate", json={
            "input_ids": prompt, "return_logprob": True,
            "sampling_params": {**greedy, "max_new_tokens": 8},
        }).json()["meta_info"]["output_token_logprobs"]  # fmt: skip
        decoded = [token for _, token, _ in answer]
        again = client.post(
            "/generate",
            json={
                "input_ids": prompt + decoded,
                "return_logprob": True,
                "logprob_start_len": len(prompt) - 1,
                "sampling_params": {**greedy, "max_new_tokens": 1},
            },
        ).json()["meta_info"]["input_token_logprobs"][1:]  # from the prompt's last: no logprob
    assert [token for _, token, _ in again] == decoded
    log = sglang_server.log_text()
    assert "decode steps: SGLang's own forward" not in log  # the lean steps ran
    assert "4-bit weights fit no layer" not in log  # on the GGUF's own blocks
    assert "CPU kernels not compiled" not in log and "not loaded" not in log
    assert any("/kernels/cpu-" in path for path in sglang_server.mapped_files())
    # The first answer token comes out of the prompt's prefill; the other 7 out of decode steps.
    gaps = [abs(a - b) for (a, _, _), (b, _, _) in zip(answer[1:], again[1:], strict=True)]
    assert max(gaps) < 0.25, (answer, again)
