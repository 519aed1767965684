"""Which kernels serve SGLang on a CPU (server/engines/sglang/cpu_compat.py): SGLang's own only on
an AMX CPU with their build installed; elsewhere, AMX or not, the `sgl_kernel` stand-in, which
SGLang's own check then reads as no AMX backend. An AMX Xeon with only the light install (no
`sgl_kernel` at all) once took the first branch and every engine failed at its first import. The
CPU's AMX is set here: the machine running the tests has it or not."""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
from pathlib import Path

import pytest

from server.engines.sglang import cpu_compat


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare_cpu_runtime's changes to sys.path and the environment, undone after the test."""
    monkeypatch.setattr(sys, "path", [e for e in sys.path if e != str(cpu_compat.STAND_IN)])
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "1")


def found(name: str) -> Path | None:
    """Where importing `name` would load it from on today's sys.path (whatever sys.modules holds:
    other tests import the stand-in)."""
    spec = importlib.machinery.PathFinder.find_spec(name)
    return None if spec is None or spec.origin is None else Path(spec.origin)


def kernels_installed(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An `sgl_kernel` package on the path, as a build from source installs it."""
    (folder / "sgl_kernel").mkdir()
    (folder / "sgl_kernel" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(folder))


@pytest.mark.parametrize("amx", [True, False], ids=["amx", "no-amx"])
@pytest.mark.usefixtures("isolated")
def test_without_a_kernel_build_the_stand_in_serves(
    monkeypatch: pytest.MonkeyPatch, amx: bool
) -> None:
    monkeypatch.setattr(cpu_compat, "cpu_has_amx", lambda: amx)
    assert found("sgl_kernel") is None  # the light install has none
    assert not cpu_compat.sglang_cpu_kernels()
    cpu_compat.prepare_cpu_runtime()
    origin = found("sgl_kernel")
    assert origin is not None and origin.is_relative_to(cpu_compat.STAND_IN)
    assert not cpu_compat.sglang_cpu_kernels()  # the stand-in is not SGLang's build


@pytest.mark.usefixtures("isolated")
def test_sglang_reads_the_stand_in_as_no_amx_backend() -> None:
    cpu_compat.prepare_cpu_runtime()
    kernels = importlib.import_module("sgl_kernel")  # SGLang's check imports it: it must import
    assert kernels.__file__ is not None
    assert Path(kernels.__file__).is_relative_to(cpu_compat.STAND_IN)
    from sglang.srt.utils import common

    available = common._is_intel_amx_backend_available.__wrapped__  # uncached
    assert available() is False


@pytest.mark.parametrize("amx", [True, False], ids=["amx", "no-amx"])
@pytest.mark.usefixtures("isolated")
def test_an_installed_build_serves_on_amx_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, amx: bool
) -> None:
    monkeypatch.setattr(cpu_compat, "cpu_has_amx", lambda: amx)
    kernels_installed(tmp_path, monkeypatch)
    assert cpu_compat.sglang_cpu_kernels() is amx
    cpu_compat.prepare_cpu_runtime()
    assert (str(cpu_compat.STAND_IN) in sys.path) is not amx
