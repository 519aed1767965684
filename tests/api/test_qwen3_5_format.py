"""The family-independent tests of tools, reasoning and free-form calls, run again on a model of
another family: a tiny Qwen3.5-format model (tests/families/: Qwen3's architecture at a toy size,
random weights, Qwen3.5's chat template) served by the real engine. Its template presents the
tools, its calls are Qwen's XML, its reasoning has the template's own switch: every guarantee the
embedded model's tests check (calls valid against their schema under each tool_choice, a named
choice one call, no call markup in text, streamed calls equal to whole ones, budgets enforced)
must hold here too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server.config import default_cache_dir
from server.models.embedded import ensure_converted
from server.prompt import Tokenizer
from server.tokenizer import load_tokenizer
from tests.api.test_responses_tools import (  # noqa: F401  (collected here, on this model)
    test_a_custom_call_streams_its_input,
    test_calls_and_their_outputs_go_back_as_input,
    test_every_sampled_input_holds_to_the_grammar,
)
from tests.api.test_thinking import (  # noqa: F401
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
from tests.families.tiny import QWEN3_5, make
from tests.server_process import ServerProcess

SERVED = "tests/qwen3.5-tiny"


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("qwen3_5") / "model"
    return make(folder, QWEN3_5, ensure_converted(default_cache_dir()))


@pytest.fixture(scope="module")
def server(model_folder: Path) -> Iterator[ServerProcess]:
    """The node on the tiny Qwen3.5-format model, for this module only."""
    log = model_folder.parent / "server.log"
    process = ServerProcess(log, "--model", str(model_folder), "--served-model-name", SERVED)
    with process.running():
        yield process


@pytest.fixture(scope="module")
def tokenizer(model_folder: Path) -> Tokenizer:
    return load_tokenizer(str(model_folder))


@pytest.fixture(scope="module")
def model(server: ServerProcess) -> str:
    return SERVED


def test_the_card_names_the_family_and_its_tool_format(server: ServerProcess) -> None:
    [card] = httpx.get(f"{server.base_url}/models").json()["data"]
    assert card["id"] == SERVED
    assert (card["family"], card["tool_format"], card["reasoning"]) == (
        "qwen3_coder",
        "qwen3_coder",
        True,
    )
    assert {"tools", "thinking"} <= set(card["capabilities"])
