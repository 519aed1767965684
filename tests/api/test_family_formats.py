"""The family-independent tests of tools, reasoning and free-form calls, run again on a model of
each other family: a tiny model made by tests/families/ (its architecture at a toy size, random
weights, the family's chat template) served by the real engine, one family at a time. Each
speaks its own format: Qwen3.5's XML calls, Qwen3's Hermes JSON, Llama 3's bare JSON one call a
turn, DeepSeek V3.1's block of calls (its tools presented by the node), Mistral's calls in
special tokens, gpt-oss's Harmony channels; reasoning has the template's own switch. Every
guarantee the embedded model's tests check (calls valid against their schema under each
tool_choice, a named choice one call, no call markup in text, streamed calls equal to whole
ones, budgets enforced) must hold on each."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from server.config import default_cache_dir
from server.models.embedded import ensure_converted
from server.prompt import Tokenizer
from server.tokenizer import load_tokenizer
from tests.api import test_responses as responses_tests
from tests.api import test_tools as tools_tests
from tests.api.test_responses import (  # noqa: F401  (collected here, on each family's model)
    test_a_required_tool_is_called_with_valid_arguments,
    test_sdk_function_tool_round_trip,
)
from tests.api.test_responses_tools import (
    test_a_custom_call_streams_its_input,
    test_calls_and_their_outputs_go_back_as_input,
    test_every_sampled_input_holds_to_the_grammar,
)
from tests.api.test_thinking import (
    test_chat_enable_thinking_fills_reasoning_content,
    test_disabled_means_no_reasoning_phase,
    test_the_budget_caps_the_reasoning_and_a_forced_call_or_a_json_answer_follows,
)
from tests.api.test_tool_markup import (  # noqa: F401
    test_a_named_choice_is_that_call_once_with_parallel_calls_on,
    test_no_cut_of_a_call_is_ever_text,
)
from tests.api.test_tools import (  # noqa: F401
    test_anthropic_one_call_when_parallel_calls_are_off,
    test_anthropic_streamed_fragments_concatenate_to_the_input,
    test_anthropic_tool_choice,
    test_anthropic_weather_loop_round_trips_history,
    test_openai_one_call_when_parallel_calls_are_off,
    test_openai_streamed_tool_call_deltas,
    test_openai_tool_choice,
    test_openai_tool_messages_round_trip,
)
from tests.families.tiny import FAMILIES, make
from tests.server_process import ServerProcess

# Each tiny model: what the card says of its chat format (family, tool format, reasoning), and
# whether the format has a call of free-form input (custom tools).
CARDS = {
    "qwen3_5": ("qwen3_coder", "qwen3_coder", True),
    "qwen3": ("hermes", "hermes", True),
    "llama3": ("llama3", "llama3", False),
    "deepseek_v31": ("deepseek_v31", "deepseekv31", True),
    "mistral": ("mistral", "mistral", False),
    "gpt_oss": ("gpt_oss", "gpt-oss", True),
}
FREE_FORM = {"qwen3_5"}
FREE_FORM_TESTS = {
    test_a_custom_call_streams_its_input.__name__,
    test_calls_and_their_outputs_go_back_as_input.__name__,
    test_every_sampled_input_holds_to_the_grammar.__name__,
}
THINKING_TESTS = {
    test_chat_enable_thinking_fills_reasoning_content.__name__,
    test_disabled_means_no_reasoning_phase.__name__,
    test_the_budget_caps_the_reasoning_and_a_forced_call_or_a_json_answer_follows.__name__,
}


# Run on the production model's family only: what they check is the family-independent part of
# the constraints (parallel calls off, a named choice once), run on the embedded model too.
EVERY_CONSTRAINT = {"qwen3_5"}
CONSTRAINT_TESTS = {
    test_anthropic_one_call_when_parallel_calls_are_off.__name__,
    test_openai_one_call_when_parallel_calls_are_off.__name__,
    test_a_named_choice_is_that_call_once_with_parallel_calls_on.__name__,
}


@dataclass(frozen=True)
class Node:
    process: ServerProcess
    folder: Path


class Nodes:
    """A node on each family's tiny model, in CARDS' order: the next one starts while the tests
    of the one before it run, and one is stopped once the tests of the next begin (two at most
    at once: each is an engine, its processes and their memory)."""

    def __init__(self, root: pytest.TempPathFactory) -> None:
        self._root = root
        self._embedded = ensure_converted(default_cache_dir())
        self._running: dict[str, Node] = {}

    def ready(self, family: str) -> Node:
        order = list(CARDS)
        for name in [name for name in self._running if order.index(name) < order.index(family)]:
            self._running.pop(name).process.stop()
        node = self._running.get(family) or self._start(family)
        following = order[order.index(family) + 1 :]
        if following and following[0] not in self._running:
            self._start(following[0])
        node.process.wait_ready()
        return node

    def _start(self, family: str) -> Node:
        folder = make(self._root.mktemp(family) / "model", FAMILIES[family], self._embedded)
        args = ("--model", str(folder), "--served-model-name", served_name(family))
        node = self._running[family] = Node(
            ServerProcess(folder.parent / "server.log", *args), folder
        )
        node.process.start()
        return node

    def close(self) -> None:
        for node in self._running.values():
            node.process.terminate()
        for node in self._running.values():
            node.process.stop()


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    started = Nodes(tmp_path_factory)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(scope="module", params=list(CARDS))
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def where_the_family_has_it(request: pytest.FixtureRequest, family: str) -> None:
    """A family without a reasoning phase refuses reasoning, one without a free-form call
    refuses custom tools (both checked below): the tests of those do not apply to it."""
    name = request.node.originalname
    if name in THINKING_TESTS and not CARDS[family][2]:
        pytest.skip(f"{family} has no reasoning phase: test_reasoning_is_refused_without_one")
    if name in FREE_FORM_TESTS and family not in FREE_FORM:
        pytest.skip(f"{family} has no free-form call: test_custom_tools_are_refused_without_one")
    if name in CONSTRAINT_TESTS and family not in EVERY_CONSTRAINT:
        pytest.skip(f"{family}: the format-independent constraints run on qwen3_5")


@pytest.fixture(autouse=True)
def room_for_the_markup(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSeek's markers are in fullwidth bars: the random model writes each byte by byte, in
    many tokens where DeepSeek's own writes one, so its calls get room for that."""
    if family == "deepseek_v31":
        for module in (tools_tests, responses_tests):  # the latter's is the former's, imported
            monkeypatch.setattr(module, "MAX_TOKENS", 3 * tools_tests.MAX_TOKENS)


@pytest.fixture(scope="module")
def node(nodes: Nodes, family: str) -> Node:
    return nodes.ready(family)


@pytest.fixture(scope="module")
def server(node: Node) -> ServerProcess:
    return node.process


@pytest.fixture(scope="module")
def tokenizer(node: Node) -> Tokenizer:
    return load_tokenizer(str(node.folder))


def served_name(family: str) -> str:
    return f"tests/{family}-tiny"


@pytest.fixture(scope="module")
def model(server: ServerProcess, family: str) -> str:
    return served_name(family)


def test_the_card_names_the_family_and_its_tool_format(
    server: ServerProcess, model: str, family: str
) -> None:
    [card] = httpx.get(f"{server.base_url}/models").json()["data"]
    assert card["id"] == model
    assert (card["family"], card["tool_format"], card["reasoning"]) == CARDS[family]
    assert "tools" in card["capabilities"]
    assert ("thinking" in card["capabilities"]) == CARDS[family][2]


def test_reasoning_is_refused_without_one(http: httpx.Client, model: str, family: str) -> None:
    """Checked before anything runs (count_tokens checks a request as a generation would)."""
    body = {
        "model": model,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "Hi"}],
    }
    response = http.post("/v1/infer/v1/messages/count_tokens", json=body)
    if CARDS[family][2]:
        assert response.status_code == 200, response.text
    else:
        assert response.status_code == 400, response.text
        assert "no known reasoning format" in response.json()["error"]["message"]


def test_custom_tools_are_refused_without_one(
    openai_client: openai.OpenAI, model: str, family: str
) -> None:
    custom = {"type": "custom", "name": "note", "description": "Add a note."}
    if family in FREE_FORM:  # taken: a required call of it is that call
        response = openai_client.responses.create(
            model=model, input="Note it.", tools=[custom], tool_choice="required",
            max_output_tokens=64,  # past the call's opening markup, whatever its input
        )  # fmt: skip
        assert [(item.type, item.name) for item in response.output] == [
            ("custom_tool_call", "note")
        ]
        return
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client.responses.create(
            model=model, input="Note it.", tools=[custom], max_output_tokens=16
        )
    assert "no call of free-form input" in str(raised.value)
