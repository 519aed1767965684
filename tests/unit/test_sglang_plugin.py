"""The SGLang plugin, as SGLang applies it in each of its processes on a CPU: every replacement
resolves and applies, the attention backend through SGLang's attention registry; the small steps
SGLang wraps in torch.compile run as the eager functions they wrap (inductor would build C++ at
their first use: seconds held on one request, and a compiler the slim image has not), with
SGLang's results, whether TorchDynamo is off (the node's default on a CPU, under which SGLang's
import pulls in no inductor) or the operator turns it on; and the embedded model's tokenizer,
whose folder declares transformers' generic class, is loaded once where SGLang's own
`get_tokenizer` loads it three times, to the same tokenizer, and once a process (the scheduler's
tokenizer is its model worker's), as it is for a model type whose own
class AutoTokenizer leaves to the declared one (gemma); a folder of a type whose declared class
transformers replaces (qwen2) goes through SGLang's function."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.unit.tokenizer_folders import typed_copy

# In a process of its own: the plugin's hooks rewrite SGLang's modules for good.
SCRIPT = """
import json, sys, torch
from server.engines.sglang.cpu_compat import prepare_cpu_runtime
prepare_cpu_runtime()
from server.engines.sglang import plugin
plugin.register()
from sglang.srt.plugins.hook_registry import HookRegistry
from sglang.srt.managers import scheduler
HookRegistry.apply_hooks()

from transformers.tokenization_utils_base import PreTrainedTokenizerBase
load = PreTrainedTokenizerBase._from_pretrained.__func__
loads = []
def counted(cls, *args, **kwargs):
    loads.append(cls.__name__)
    return load(cls, *args, **kwargs)
PreTrainedTokenizerBase._from_pretrained = classmethod(counted)
arguments = dict(tokenizer_mode="auto", trust_remote_code=False, revision=None,
                 tokenizer_backend="huggingface")  # as SGLang's scheduler passes them
texts = ["Hello, world!", "<|im_start|>user\\n  tabs\\tand \\u00e9t\\u00e9 \\U0001F600<|im_end|>"]
def seen(tokenizer):
    return {"class": type(tokenizer).__name__, "init": repr(sorted(tokenizer.init_kwargs.items())),
            "vocab": tokenizer.get_vocab(), "special": tokenizer.all_special_tokens,
            "template": tokenizer.chat_template, "ids": [tokenizer.encode(t) for t in texts],
            "text": [tokenizer.decode(tokenizer.encode(t)) for t in texts],
            "stops": sorted(getattr(tokenizer, "additional_stop_token_ids", None) or ())}
original = getattr(scheduler.get_tokenizer, "__wrapped__", scheduler.get_tokenizer)
def compared(folder):
    loads[:] = []
    first = scheduler.get_tokenizer(folder, **arguments)
    hooked = seen(first)
    shared = scheduler.get_tokenizer(folder, **arguments) is first  # the model worker's load
    hooked_loads, loads[:] = list(loads), []
    sglangs = seen(original(folder, **arguments))
    return {"hooked": hooked, "hooked_loads": hooked_loads, "sglangs": sglangs,
            "sglangs_loads": list(loads), "shared": shared}
applied = plugin.unapplied(True)
targets = [planned.target for planned in plugin.hooks(True)]
from sglang.srt.plugins.hook_registry import HookType
gone = plugin.Hook("sglang.srt.layers.sampler.no_such_function", lambda: None, "REPLACE")
HookRegistry.register(gone.target, gone.hook, HookType.REPLACE)
HookRegistry.apply_hooks()  # SGLang logs the failure and goes on
planned = plugin.hooks
checked = next(h.hook for h in planned(True) if h.target == plugin.SCHEDULER_INIT)
whole = checked(None)  # SGLang's scheduler, before it is built, with every replacement applied
plugin.hooks = lambda cpu: [*planned(cpu), gone]
half = plugin.unapplied(True)
try:
    checked(None)
    refused = None
except Exception as error:
    refused = f"{type(error).__name__}: {error}"
plugin.hooks = planned
from sglang.srt.layers.attention import attention_registry
from server.engines.sglang.cpu import attention
registered = attention_registry.ATTENTION_BACKENDS["torch_native"]
backend = registered.__qualname__, registered is attention.create_backend
attention_registry.register_attention_backend("torch_native")(lambda runner: None)  # another's
overridden = plugin.unapplied(True)
attention_registry.register_attention_backend("torch_native")(registered)
print(json.dumps({"unapplied": applied, "targets": targets, "half": half,
                  "scheduler": [whole, refused],
                  "backend": backend, "overridden": overridden,
                  "tokenizers": {folder: compared(folder) for folder in sys.argv[1:]}}))
"""
# The compiled steps, called where the plugin's hooks are applied as in a scheduler.
COMPILED = """
import json, sys, torch
from server.engines.sglang.cpu_compat import prepare_cpu_runtime
prepare_cpu_runtime()
from server.engines.sglang import plugin
plugin.register()
from sglang.srt.plugins.hook_registry import HookRegistry
from sglang.srt.managers import scheduler
HookRegistry.apply_hooks()
from torch._dynamo.utils import counters
from sglang.srt.layers import sampler
from sglang.srt.sampling.penaltylib import repetition_penalty
logits = torch.tensor([[-2.0, 3.0, 0.5], [1.0, -1.0, 4.0]])
repetition_penalty.apply_scaling_penalties(logits, torch.tensor([[2.0, 2.0, 1.0], [4.0, 4.0, 0.5]]))
logprobs = torch.log_softmax(torch.tensor([[0.1, 2.0, 0.3]]), dim=-1)
drawn = sampler.multinomial_with_seed(logprobs, torch.tensor([7]), torch.tensor([3]))
print(json.dumps({"unapplied": plugin.unapplied(True), "penalized": logits.tolist(),
                  "drawn": drawn.shape[0], "compiled": sum(counters["frames"].values()),
                  "inductor": "torch._inductor.compile_fx" in sys.modules}))
"""


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from server.config import default_cache_dir
    from server.models.embedded import ensure_converted

    folder = ensure_converted(default_cache_dir())
    # The embedded model's tokenizer in folders typed as other models (see the tests below).
    typed = {
        model_type: typed_copy(folder, tmp_path_factory.mktemp(f"{model_type}-typed"), model_type)
        for model_type in ("gemma", "qwen2")
    }
    folders = {"embedded": folder, **typed}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *map(str, folders.values())],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    tokenizers = result.pop("tokenizers")
    return {**result, **{name: tokenizers[str(path)] for name, path in folders.items()}}


def test_every_replacement_resolves_and_applies(seen: dict[str, Any]) -> None:
    """The CPU path's and the general ones, against the installed SGLang; one whose target is
    not there is named (the node then refuses to start: server/engines/sglang/pins.py)."""
    assert seen["unapplied"] == [], seen["unapplied"]
    assert len(seen["targets"]) == len(set(seen["targets"])) >= 14
    assert seen["half"] == ["sglang.srt.layers.sampler.no_such_function"]


def test_sglangs_scheduler_is_not_built_where_a_replacement_did_not_apply_in_its_process(
    seen: dict[str, Any],
) -> None:
    """The check hooked before SGLang's Scheduler is built: it passes with every replacement
    applied, and with one missing it raises (the scheduler then fails, and the start with it)."""
    whole, refused = seen["scheduler"]
    assert whole is None
    assert refused is not None and refused.startswith("ModelSetupError: SGLang's scheduler")
    assert "sglang.srt.layers.sampler.no_such_function" in refused


def test_the_attention_backend_is_registered_in_sglangs_attention_registry(
    seen: dict[str, Any],
) -> None:
    """Under the name SGLang runs on a CPU without AMX; another factory there is named."""
    assert seen["backend"] == ["create_backend", True]
    assert seen["overridden"] == ["the torch_native attention backend"]


@pytest.mark.parametrize("dynamo", [None, "0"], ids=["dynamo-off-by-default", "dynamo-on"])
def test_compiled_steps_run_eagerly_with_sglangs_results(dynamo: str | None) -> None:
    env = {key: value for key, value in os.environ.items() if key != "TORCHDYNAMO_DISABLE"}
    if dynamo is not None:  # the operator's choice, which the node keeps
        env["TORCHDYNAMO_DISABLE"] = dynamo
    done = subprocess.run(
        [sys.executable, "-c", COMPILED], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["unapplied"] == [], seen
    assert seen["compiled"] == 0, seen  # no frame went through dynamo
    # SGLang's rule: a negative logit multiplied by its penalty, a positive one divided.
    assert seen["penalized"] == [[-4.0, 1.5, 0.5], [0.25, -4.0, 8.0]]
    assert seen["drawn"] == 1
    # SGLang's torch.compile decorators import inductor only where dynamo is on.
    assert seen["inductor"] is (dynamo == "0")


@pytest.mark.parametrize("folder", ["embedded", "gemma"])
def test_a_generic_tokenizer_is_loaded_once_as_sglang_would_load_it(
    seen: dict[str, Any], folder: str
) -> None:
    """The embedded model's own folder (llama: no tokenizer class of its own), and the same
    tokenizer typed gemma (a class of its own, which AutoTokenizer leaves to the declared one)."""
    loaded = seen[folder]
    assert loaded["sglangs_loads"] == ["TokenizersBackend"] * 3  # what the hook saves
    # Twice called, as by the scheduler and its model worker: one load, one tokenizer.
    assert loaded["hooked_loads"] == ["TokenizersBackend"]
    assert loaded["shared"] is True
    assert loaded["hooked"] == loaded["sglangs"]


def test_a_type_whose_declared_class_transformers_replaces_goes_through_sglang(
    seen: dict[str, Any],
) -> None:
    typed = seen["qwen2"]
    assert typed["sglangs"]["class"] == "Qwen2Tokenizer"  # AutoTokenizer's pick, not the declared
    assert typed["hooked_loads"] == typed["sglangs_loads"] * 2  # SGLang's function, each call
    assert typed["shared"] is False
    assert typed["hooked"] == typed["sglangs"]
