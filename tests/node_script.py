"""Running one of the Node client scripts in tests/node against a test server."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.conftest import repo_root
from tests.server_process import ServerProcess


def run_script(name: str, server: ServerProcess, model: str) -> dict[str, Any]:
    """Runs tests/node/<name> on the server and model; the JSON line it prints last."""
    script = repo_root() / "tests/node" / name
    done = subprocess.run(
        ["node", str(script), server.base_url, model],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=script.parent,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
