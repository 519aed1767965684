"""The CPU path's C kernels (`kernels/`) compiled on the machine that runs them, for its own vector
units (`-march=native`), into one library in the cache folder: once per source, compiler and CPU,
a second start loads the same file. The node compiles them before SGLang's processes start and
names the file in KERNELS_ENV for them (`native.loaded`). Without torch: the node compiles them
before its first import of torch, beside which the forkserver starts."""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

KERNELS_ENV = "B3OS_INFER_CPU_KERNELS"  # the compiled library's path, for SGLang's processes
SOURCES = Path(__file__).parent / "kernels"  # its *.c, compiled into one library (and *.h)
FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-fPIC")
# Linked apart from FLAGS: -ffast-math at the link adds crtfastmath.o, which flushes subnormals to
# zero in every thread of the process that loads the library (torch's and Python's floats too).
LINK = ("-shared", "-fopenmp")
LIBRARIES = ("-lmvec", "-lm")  # glibc's vector expf, which -ffast-math loops call


class BuildError(RuntimeError):
    """The kernels could not be compiled here."""


def build(cache_dir: Path) -> Path:
    """The compiled library, compiled now where this source, compiler and CPU have none yet."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise BuildError("no C compiler (cc, gcc or $CC) on PATH")
    version = _output([compiler, "--version"]).splitlines()[0]
    sources = sorted(SOURCES.glob("*.c"))
    digest = hashlib.sha256()
    for source in sorted(SOURCES.glob("*.[ch]")):  # the headers they include too
        digest.update(source.name.encode() + source.read_bytes())
    for part in (" ".join(FLAGS), " ".join(LINK), version, _cpu()):
        digest.update(part.encode())
    target = _folder(cache_dir) / f"cpu-{digest.hexdigest()[:16]}.so"
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        objects = [str(Path(scratch) / f"{source.stem}.o") for source in sources]
        log.info("compiling the CPU kernels: %s %s", compiler, " ".join(FLAGS))
        for source, made in zip(sources, objects, strict=True):
            _output([compiler, *FLAGS, "-c", str(source), "-o", made])
        _output([compiler, *LINK, "-o", str(built), *objects, *LIBRARIES])
        os.replace(built, target)  # whole, whatever another process does at the same time
    return target


def _folder(cache_dir: Path) -> Path:
    """cache_dir/kernels, or where this user can write when it cannot (a read-only cache)."""
    for folder in (
        cache_dir / "kernels",
        Path(tempfile.gettempdir()) / f"b3os-infer-kernels-{os.getuid()}",
    ):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            return folder
    raise BuildError(f"nowhere to write the kernels: {cache_dir / 'kernels'} is read-only")


def _output(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    except OSError as error:
        raise BuildError(f"{command[0]}: {error}") from error
    if done.returncode != 0:
        raise BuildError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _cpu() -> str:
    """What -march=native compiles for: the machine and its CPU's model and flags."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine()
    wanted = ("model name", "flags", "Features")
    lines = {line.split(":")[0].strip(): line for line in info.splitlines() if ":" in line}
    return platform.machine() + "".join(lines.get(key, "") for key in wanted)
