"""The forkserver starts before the node imports torch (on a CPU build of torch): it imports
torch and SGLang's processes' modules while the node does the same, rather than after the node's
own torch import. Then the node's CPU runtime is ready, its stand-ins on the path. And each
process forked from it leaves what it inherits to the collector's permanent generation."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# In a process of its own, importing nothing before; the forkserver's preload left out (its
# imports are not what is checked, and would run on after this process ends).
SCRIPT = """
import json, os, sys
first = []
def audit(event, args):
    if event == "import" and args[0] == "torch" and not first:
        first.append(os.environ.get("B3OS_INFER_FORKSERVER"))
sys.addaudithook(audit)
from server.config import Settings, default_cache_dir
from server.engines.sglang import cpu_compat, forkserver
forkserver.PRELOAD = []
forkserver.start(Settings(cache_dir=default_cache_dir()))
print(json.dumps({"forkserver at torch's import": first, "torch": "torch" in sys.modules,
                  "stand-in": str(cpu_compat.STAND_IN) in sys.path,
                  "sglang's kernels": cpu_compat.sglang_cpu_kernels(),
                  "dynamo": os.environ.get("TORCHDYNAMO_DISABLE")}))
"""


def test_the_forkserver_runs_before_the_node_imports_torch() -> None:
    env = {key: value for key, value in os.environ.items() if key != "TORCHDYNAMO_DISABLE"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["forkserver at torch's import"] == ["1"], seen
    assert seen["torch"] and seen["dynamo"] == "1", seen
    assert seen["stand-in"] is not seen["sglang's kernels"], seen


# The node's forkserver, with its real preload; a pool worker forked from it reports.
FORKED = """
import gc, json, multiprocessing
from server.config import Settings, default_cache_dir
from server.engines.sglang import forkserver
forkserver.start(Settings(cache_dir=default_cache_dir()))
with multiprocessing.get_context("forkserver").Pool(1) as pool:
    child = pool.apply(gc.get_freeze_count)
print(json.dumps({"child": child, "parent": gc.get_freeze_count()}))
"""


def test_a_process_forked_from_the_forkserver_leaves_what_it_inherits_to_the_collector() -> None:
    """Frozen in the child (a full collection there walks only its own objects: SGLang's imports
    are inherited), not in the forkserver, whose interpreter shutdown would report frozen native
    objects as leaks."""
    env = {key: value for key, value in os.environ.items() if key != "TORCHDYNAMO_DISABLE"}
    done = subprocess.run(
        [sys.executable, "-c", FORKED], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    frozen = json.loads(done.stdout.strip().splitlines()[-1])
    assert frozen["child"] > 100_000 and frozen["parent"] == 0, frozen
    assert "leaked" not in done.stderr, done.stderr[-3000:]
