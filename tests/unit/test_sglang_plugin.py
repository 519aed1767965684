"""The SGLang plugin, as SGLang applies it in each of its processes on a CPU: the small steps
SGLang wraps in torch.compile run as the eager functions they wrap (inductor would build C++ at
their first use: seconds held on one request, and a compiler the slim image has not), with
SGLang's results."""

from __future__ import annotations

import json
import subprocess
import sys

# In a process of its own: the plugin's hooks rewrite SGLang's modules for good.
SCRIPT = """
import json, torch
from server.engines.sglang.cpu_compat import prepare_cpu_runtime
prepare_cpu_runtime()
from server.engines.sglang import plugin
plugin.register()
from sglang.srt.plugins.hook_registry import HookRegistry
HookRegistry.apply_hooks()
from torch._dynamo.utils import counters
from sglang.srt.layers import sampler
from sglang.srt.sampling.penaltylib import repetition_penalty
logits = torch.tensor([[-2.0, 3.0, 0.5], [1.0, -1.0, 4.0]])
repetition_penalty.apply_scaling_penalties(logits, torch.tensor([[2.0, 2.0, 1.0], [4.0, 4.0, 0.5]]))
logprobs = torch.log_softmax(torch.tensor([[0.1, 2.0, 0.3]]), dim=-1)
drawn = sampler.multinomial_with_seed(logprobs, torch.tensor([7]), torch.tensor([3]))
print(json.dumps({"penalized": logits.tolist(), "drawn": drawn.shape[0],
                  "compiled": sum(counters["frames"].values())}))
"""


def test_compiled_steps_run_eagerly_with_sglangs_results() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["compiled"] == 0, seen  # no frame went through dynamo
    # SGLang's rule: a negative logit multiplied by its penalty, a positive one divided.
    assert seen["penalized"] == [[-4.0, 1.5, 0.5], [0.25, -4.0, 8.0]]
    assert seen["drawn"] == 1
