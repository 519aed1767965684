"""Every sampling parameter changes generation the way its documentation says, with the real
model, on both protocols where it exists; and logprobs come back in OpenAI's shape. What is
asserted is what the parameters guarantee (greedy repeats, a seed repeats, a banned token is
gone), never what the model happens to write.

Repeats are compared once the prompt is in the prefix cache: on a CPU the first request of a
prompt computes its last token in a larger batch than the repeats do, and CPU GEMMs are not
batch-invariant (SGLang's batch-invariant kernels are GPU-only), so a near-tie can go the other
way once (see docs/api.md). Beside other decoding streams the node's compiled kernels compute each
row alone: a seeded repeat there samples the same tokens."""

from __future__ import annotations

import functools
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx
import openai
import pytest

from server.config import default_cache_dir
from server.models.embedded import ensure_converted
from server.tokenizer import load_tokenizer
from tests.api.sse import events

STORY = [{"role": "user", "content": "Tell me a short story about a cat."}]
# A trailing assistant turn the model continues: greedy decoding goes on repeating it.
REPEAT = [
    {"role": "user", "content": "Write the word dog forty times."},
    {"role": "assistant", "content": "dog dog dog dog dog dog dog dog"},
]
TOKENS = 16


def chat(client: openai.OpenAI, model: str, **options: Any) -> Any:
    options.setdefault("messages", STORY)
    options.setdefault("max_tokens", TOKENS)
    return client.chat.completions.create(model=model, **options)


def text(client: openai.OpenAI, model: str, **options: Any) -> str:
    return str(chat(client, model, **options).choices[0].message.content)


def messages_text(client: anthropic.Anthropic, model: str, **sampling: Any) -> str:
    """Sampling options go in the body as they are (the SDK types only some of them)."""
    message = client.messages.create(
        model=model, max_tokens=TOKENS, messages=STORY, extra_body=sampling
    )
    return "".join(block.text for block in message.content if block.type == "text")


def repeated(call: Any) -> tuple[Any, Any]:
    """Two answers to the same request, once its prompt is in the prefix cache."""
    call()
    return call(), call()


def test_greedy_answers_repeat_exactly(
    openai_client: openai.OpenAI, anthropic_client: anthropic.Anthropic, model: str
) -> None:
    first, second = repeated(lambda: text(openai_client, model, temperature=0))
    assert first == second
    first, second = repeated(lambda: messages_text(anthropic_client, model, temperature=0))
    assert first == second


@pytest.mark.every_engine
def test_a_seed_repeats_a_sampled_answer_and_others_differ(
    openai_client: openai.OpenAI, model: str
) -> None:
    seeded, again = repeated(lambda: text(openai_client, model, temperature=1.0, seed=7))
    assert again == seeded
    # The others only need to differ, not to repeat: sent at once (the runtime batches them).
    with ThreadPoolExecutor(max_workers=6) as pool:
        sample = functools.partial(text, openai_client, model, temperature=1.0)
        seeds = [pool.submit(sample, seed=seed) for seed in (1, 2, 3)]
        free = [pool.submit(sample) for _ in range(3)]
        others, unseeded = {f.result() for f in seeds}, {f.result() for f in free}
    assert others - {seeded}, "three other seeds all gave the same answer as seed 7"
    # Without a seed each request draws its own: not all the same either.
    assert len(unseeded) > 1


def test_top_k_1_and_top_p_0_equal_greedy(
    openai_client: openai.OpenAI, anthropic_client: anthropic.Anthropic, model: str
) -> None:
    greedy, _ = repeated(lambda: text(openai_client, model, temperature=0))
    assert text(openai_client, model, temperature=1.0, extra_body={"top_k": 1}) == greedy
    assert text(openai_client, model, temperature=1.0, top_p=0) == greedy
    messages_greedy, _ = repeated(lambda: messages_text(anthropic_client, model, temperature=0))
    assert messages_text(anthropic_client, model, temperature=1.0, top_k=1) == messages_greedy


def test_min_p_1_keeps_only_the_likeliest_tokens(openai_client: openai.OpenAI, model: str) -> None:
    """min_p 1 keeps the tokens as likely as the most likely one (with a seed: SGLang's seeded
    sampler). Each chosen token is one of them; not greedy's answer, as bf16 logits tie often and
    the sampler draws among the tied where argmax takes the first."""
    answer = chat(
        openai_client,
        model,
        temperature=1.0,
        seed=5,
        logprobs=True,
        top_logprobs=3,
        extra_body={"min_p": 1},
    )
    entries = answer.choices[0].logprobs.content
    assert entries
    for entry in entries:
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob), entry


def test_top_k_off_and_a_low_top_p_still_sample(openai_client: openai.OpenAI, model: str) -> None:
    answers = {
        text(openai_client, model, temperature=1.0, seed=seed, extra_body={"top_k": -1})
        for seed in (11, 12, 13)
    }
    assert len(answers) > 1


def first_token(response: Any) -> tuple[str, list[Any]]:
    entry = response.choices[0].logprobs.content[0]
    return entry.token, entry.top_logprobs


def test_a_strongly_negative_logit_bias_removes_the_greedy_token(
    openai_client: openai.OpenAI, tokenizer_ids: Any, model: str
) -> None:
    greedy = chat(openai_client, model, temperature=0, logprobs=True, top_logprobs=1)
    token, _ = first_token(greedy)
    token_id = tokenizer_ids(token)
    biased = chat(
        openai_client,
        model,
        temperature=0,
        logprobs=True,
        top_logprobs=1,
        logit_bias={str(token_id): -100},
    )
    # The answer's first token is another one, and its text is that token's: "There" may follow
    # a banned "The", and a string prefix could not tell them apart.
    first, _ = first_token(biased)
    assert first != token
    assert str(biased.choices[0].message.content).startswith(first)


@pytest.fixture(scope="module")
def tokenizer_ids() -> Any:
    """A token's id in the served model's vocabulary (logprobs name tokens, logit_bias takes
    ids), from the same tokenizer files the server loads."""
    tokenizer = load_tokenizer(str(ensure_converted(default_cache_dir())))

    def token_id(token: str) -> int:
        ids = tokenizer.encode(token, add_special_tokens=False)
        assert len(ids) == 1, (token, ids)
        return int(ids[0])

    return token_id


def test_penalties_change_a_repetitive_answer(openai_client: openai.OpenAI, model: str) -> None:
    options = {"messages": REPEAT, "max_tokens": 32, "temperature": 0}
    repetitive = text(openai_client, model, **options)
    for penalty in (
        {"frequency_penalty": 2.0},
        {"presence_penalty": 2.0},
        {"extra_body": {"repetition_penalty": 2.0}},
    ):
        assert text(openai_client, model, **options, **penalty) != repetitive, penalty


def test_stop_strings_and_max_completion_tokens(openai_client: openai.OpenAI, model: str) -> None:
    counting = [
        {"role": "user", "content": "Count from 1 to 50, separated by commas."},
        {"role": "assistant", "content": "1, 2, 3"},
    ]
    stopped = chat(openai_client, model, temperature=0, messages=counting, stop=[", 6", ", 9"])
    assert stopped.choices[0].finish_reason == "stop"
    assert ", 6" not in str(stopped.choices[0].message.content)
    capped = chat(
        openai_client,
        model,
        temperature=0,
        messages=counting,
        max_tokens=40,
        max_completion_tokens=5,
    )
    assert capped.usage.completion_tokens == 5
    assert capped.choices[0].finish_reason == "length"


def assert_logprobs(content: str, entries: list[Any], top: int) -> None:
    assert entries
    assert "".join(entry.token for entry in entries) == content
    assert b"".join(bytes(entry.bytes) for entry in entries).decode() == content
    for entry in entries:
        assert entry.logprob <= 0 and math.isfinite(entry.logprob)
        alternatives = [choice.logprob for choice in entry.top_logprobs]
        assert len(alternatives) == top
        assert alternatives == sorted(alternatives, reverse=True)
        # Greedy: the chosen token is the most likely one, or one tied with it (a model computed
        # in bf16, as on a CPU with AVX-512 BF16, has bf16 logits: 8 bits of mantissa tie often,
        # and the sampler's argmax and the logprobs' top-k each break the tie their own way).
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)
        tied = [c.token for c in entry.top_logprobs if c.logprob == entry.top_logprobs[0].logprob]
        assert entry.token in tied or len(tied) == top, (entry.token, entry.top_logprobs)


def test_logprobs_in_openais_shape(openai_client: openai.OpenAI, model: str) -> None:
    response = chat(openai_client, model, temperature=0, logprobs=True, top_logprobs=3)
    choice = response.choices[0]
    assert_logprobs(str(choice.message.content), choice.logprobs.content, 3)
    plain = chat(openai_client, model, temperature=0)
    assert plain.choices[0].logprobs is None


@pytest.mark.every_engine
def test_logprobs_streamed_per_chunk(openai_client: openai.OpenAI, model: str) -> None:
    stream = chat(openai_client, model, temperature=0, logprobs=True, top_logprobs=2, stream=True)
    content, entries = "", []
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        if choice.delta.content:
            content += choice.delta.content
            # Each text chunk carries the logprobs of the tokens it holds.
            assert choice.logprobs is not None
            assert "".join(e.token for e in choice.logprobs.content) == choice.delta.content
        if choice.logprobs is not None:
            entries.extend(choice.logprobs.content)
    assert_logprobs(content, entries, 2)


def test_logprobs_over_raw_http_have_the_exact_fields(http: httpx.Client, model: str) -> None:
    body = {
        "model": model,
        "max_tokens": 4,
        "temperature": 0,
        "logprobs": True,
        "messages": STORY,
        "stream": True,
    }
    with http.stream("POST", "/v1/infer/chat/completions", json=body) as response:
        chunks = [data for _, data in events(response) if data != "[DONE]"]
    with_logprobs = [c["choices"][0]["logprobs"] for c in chunks if c["choices"][0]["logprobs"]]
    assert with_logprobs
    for logprobs in with_logprobs:
        assert set(logprobs) == {"content", "refusal"}
        for entry in logprobs["content"]:
            assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
            assert entry["top_logprobs"] == []  # no top_logprobs asked for


def test_a_seeded_answer_is_the_same_beside_other_streams(
    openai_client: openai.OpenAI, model: str
) -> None:
    """On a CPU with the node's compiled kernels each decode row is computed alone, whatever
    streams decode beside it (up to 16): the repeat alone and the repeat beside two streams that
    are decoding all the while sample the same tokens."""
    seeded = functools.partial(
        text, openai_client, model, temperature=1.0, seed=7, max_tokens=48, messages=STORY
    )
    alone, _ = repeated(seeded)
    others = [
        [{"role": "user", "content": "Write a long poem about the sea."}],
        [{"role": "user", "content": "List every country in Europe, one a line."}],
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        streams = [pool.submit(decoding, openai_client, model, turn) for turn in others]
        started = [stream.result() for stream in streams]  # each has its first token
        try:
            beside = seeded()
            for stream in started:  # and was still decoding when the repeat ended
                chunk = next(iter(stream))
                assert chunk.choices and chunk.choices[0].finish_reason is None
        finally:
            for stream in started:
                stream.close()
    assert beside == alone


def decoding(client: openai.OpenAI, model: str, messages: list[dict[str, str]]) -> Any:
    """A greedy stream of up to 400 tokens, once its first token has come (closing it aborts
    the rest)."""
    stream = client.chat.completions.create(
        model=model, messages=messages, max_tokens=400, temperature=0, stream=True
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    return stream
