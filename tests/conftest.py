"""Fixtures shared by the suite: one real server (real SGLang, real model) per engine per test
session. A test of the server runs against the in-process engine (`sglang`). Those marked
`every_engine` (what crosses the engine interface: streams, stops, constraints, logprobs,
aborts, the context window) run through `sglang-router` too: the remote engine behind
sglang-router in front of two SGLang servers (tests/topology.py), which runs every line of the
remote engine that one server would. Those marked `remote_only` run against the remote engine on
SGLang's own HTTP server (`b3os-infer sglang-server`), those marked `router_only` through the
router only.

The TLS server starts in the background while the router's tests run (`engines_start_ahead`)."""

from __future__ import annotations

import importlib
import os
import shlex
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from hypothesis import settings

from tests.server_process import ServerProcess, Shutdowns, StartQueue, Zygote
from tests.topology import RouterTopology, topology_of, wait_started

ENGINES = tuple(
    os.environ.get("B3OS_TEST_ENGINES", "sglang,sglang-remote,sglang-router").split(",")
)
# The engines a test of each marker runs on; unmarked tests run in-process only.
PLACES = {
    "every_engine": ("sglang", "sglang-router"),
    "remote_only": ("sglang-remote",),
    "router_only": ("sglang-router",),
}
# Flags for the session's servers beyond the defaults (the embedded model on this machine's
# device): `python -m bench.gpu_check` runs the suite on a GPU with "--model ... --device cuda".
MODEL_ARGS = tuple(shlex.split(os.environ.get("B3OS_TEST_MODEL_ARGS", "")))

# The property tests draw the same examples on every run, so that a run's cost and its verdict
# are the code's (a drawn prompt near the window's size prefills for minutes); and they write no
# example database, which the suite's processes side by side would share. HYPOTHESIS_PROFILE=random
# draws new examples each run.
settings.register_profile("derandomized", derandomize=True, database=None)
settings.register_profile("random", database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "derandomized"))


# The suite's two shards, which `python -m tests.shards` (`make test`) runs side by side: the tests
# on the remote engine (on SGLang's own server and through the router), the agents' CLIs and the
# families' tiny models, with most unit tests (no server); and the rest (in-process, over TLS).
# Their engines are apart.
AGENTS_AND_FAMILIES, CORE = SHARDS = ("agents-and-families", "core")
# The unit tests the core's shard runs, to even the shards' times: the two that read every
# published template, the differential test (minutes of Hypothesis examples across every family)
# and the formats' checks, in one process, which prepares each template once for both
# (tests/families/formats.py). The other units are the agents' shard's.
CORE_UNITS = ("test_differential.py", "test_formats.py")
ENGINE_SHARD = {"sglang-remote": AGENTS_AND_FAMILIES, "sglang-router": AGENTS_AND_FAMILIES}
UNITS = Path(__file__).resolve().parent / "unit"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shard", choices=SHARDS, help="run one of the suite's shards (python -m tests.shards)"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "every_engine: crosses the engine interface: in-process and through the router"
    )
    config.addinivalue_line("markers", "remote_only: about the sglang-remote engine only")
    config.addinivalue_line("markers", "router_only: about the remote engine behind a router")
    config.addinivalue_line("markers", f"shard(name): the shard of its tests, one of {SHARDS}")


def places(item: pytest.Item) -> tuple[str, ...]:
    """The engines `item` runs on."""
    for marker, engines in PLACES.items():
        if item.get_closest_marker(marker) is not None:
            return engines
    return ("sglang",)


def shard(item: pytest.Item) -> str:
    """The shard `item` runs in: the units' (CORE_UNITS), its marker's, its engine's, or the
    core."""
    if item.path.is_relative_to(UNITS):
        return CORE if item.path.name in CORE_UNITS else AGENTS_AND_FAMILIES
    marker = item.get_closest_marker("shard")
    if marker is not None:
        if marker.args[0] not in SHARDS:  # its tests would run in no shard
            raise pytest.UsageError(f"{item.nodeid}: shard {marker.args[0]!r} is not in {SHARDS}")
        return str(marker.args[0])
    callspec = getattr(item, "callspec", None)
    engine = callspec.params.get("engine") if callspec is not None else None
    return ENGINE_SHARD.get(str(engine), CORE)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The core's shard does not import the unit tests it does not run (`shard`)."""
    if (
        config.getoption("shard") == CORE
        and collection_path.is_relative_to(UNITS)
        and collection_path.suffix == ".py"
        and collection_path.name not in CORE_UNITS
    ):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def redundant(item: pytest.Item) -> bool:
        callspec = getattr(item, "callspec", None)
        if callspec is None or "engine" not in callspec.params:
            return False
        return callspec.params["engine"] not in places(item)

    chosen = config.getoption("shard")
    dropped = [item for item in items if redundant(item) or chosen not in (None, shard(item))]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(map(id, dropped))
        items[:] = [item for item in items if id(item) not in gone]


@pytest.fixture(scope="session", params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session", autouse=True)
def one_default_tls_context() -> Iterator[None]:
    """httpx builds a TLS context for every client it makes (certifi's bundle parsed: about 20 ms
    of CPU on a fast core), even for a plain-HTTP origin, and most tests make one or more (SDK and
    raw clients, polls every 50 ms beside a busy engine). Its clients of default
    settings share one context, as an application's one client would; a client given its own
    (the TLS server's trust) keeps it. (The anthropic SDK runs its own copy of httpx, httpx2.)"""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("httpx._transports.default", "httpx2._transports.default"):
            transports = importlib.import_module(name)
            patch.setattr(transports, "create_ssl_context", shared_default(transports))
        yield


def shared_default(transports: Any) -> Callable[..., Any]:
    made = transports.create_ssl_context
    shared = made()

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if verify is True and cert is None and trust_env:
            return shared
        return made(verify=verify, cert=cert, trust_env=trust_env)

    return create_ssl_context


@pytest.fixture(scope="session", autouse=True)
def zygote(request: pytest.FixtureRequest) -> Iterator[None]:
    """The session's nodes fork from a process that has imported what they import
    (tests/zygote.py), started here, from the main thread (a child's parent-death signal follows
    the thread that started it), unless the session runs unit tests only."""
    if all(item.path.is_relative_to(UNITS) for item in request.session.items):
        yield
        return
    ServerProcess.zygote = Zygote()
    try:
        yield
    finally:
        ServerProcess.zygote.close()
        ServerProcess.zygote = None


@pytest.fixture(scope="session")
def shutdowns() -> Iterator[Shutdowns]:
    """The session's servers, stopped together at its end."""
    stops = Shutdowns()
    try:
        yield stops
    finally:
        stops.wait()


# The session's engines, by the names below: the in-process one (the session server on `sglang`),
# three session fixtures, each waiting on its `<name>_start` in the start queue, and the agents'
# node. Those in STARTED_AHEAD are put in the queue ahead of their first tests
# (`engines_start_ahead`); each stops after its last test (`engines_stop_after_their_last_test`).
IN_PROCESS = "in-process"
ENGINES_BY_NAME = (IN_PROCESS, "sglang_server", "router_topology", "tls_server", "agent_node")
STARTED_AHEAD = ("tls_server",)
# The engine a session server on each engine uses beside its own front.
ENGINE_BEHIND = {
    "sglang": IN_PROCESS,
    "sglang-remote": "sglang_server",
    "sglang-router": "router_topology",
}


def engines_used(item: pytest.Item) -> set[str]:
    """The session engines `item` uses, by the names above."""
    names = set(getattr(item, "fixturenames", ()))
    used = names & set(ENGINES_BY_NAME)
    callspec = getattr(item, "callspec", None)
    if "server" in names and callspec is not None and "engine" in callspec.params:
        used.add(ENGINE_BEHIND[callspec.params["engine"]])
    return used


@pytest.fixture(scope="session")
def engine_order(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The session's engines in the order the selected tests first use them."""
    order: list[str] = []
    for item in request.session.items:
        for name in sorted(engines_used(item) - set(order), key=ENGINES_BY_NAME.index):
            order.append(name)
    return tuple(order)


@pytest.fixture(autouse=True)
def engines_start_ahead(request: pytest.FixtureRequest, engine_order: tuple[str, ...]) -> None:
    """Once a test uses an engine, the next engine the session uses starts in the background if
    it is one of STARTED_AHEAD, so that its 30-60 s start runs beside the tests before it rather
    than in its first test's setup. Only where those tests leave room for it: a start keeps both
    cores busy, and slows an engine computing beside it more than its share of the cores would
    say (likely its two OpenMP threads waiting for each other). Measured in whole-suite runs on a
    2-core machine, each phase's time the sum of pytest's durations:
    - the TLS server, beside the router's tests: they took 127-141 s with it, against 143-146 s
      without (the router topology's start, 43-56 s, in their first setup in each of these
      runs), and its 26-34 s setup left the tests after them (100-130 s, against 148-159 s);
    - SGLang's own server, beside the in-process tests: they took 284-309 s, against 234-272 s,
      for the 27-35 s its start took from the remote tests' setup: not started ahead;
    - the router topology, beside the agents' 5,000-7,500-token prompts, cost them more than the
      49 s of its start: not started ahead;
    - every engine started at once ahead of the in-process tests: those took 493 s."""
    used = engines_used(request.node)
    if not used:
        return
    following = engine_order[max(engine_order.index(name) for name in used) + 1 :]
    if following and following[0] in STARTED_AHEAD:
        request.getfixturevalue(f"{following[0]}_start")


@pytest.fixture(scope="session")
def last_users(request: pytest.FixtureRequest) -> dict[str, str]:
    """Each session engine's last test (its node id)."""
    last = {}
    for item in request.session.items:
        for name in engines_used(item):
            last[name] = item.nodeid
    return last


@pytest.fixture(autouse=True)
def engines_stop_after_their_last_test(
    request: pytest.FixtureRequest, last_users: dict[str, str]
) -> Iterator[None]:
    """An engine no test is left to use is told to stop once its last test is done, rather than
    at the session's end: the shards' engines share the machine's memory, and one too many has
    every process waiting on it. (Its exit is waited for with the others, at the end.)"""
    ending = [request.getfixturevalue("server" if name == IN_PROCESS else name)
              for name, last in last_users.items() if last == request.node.nodeid]  # fmt: skip
    yield
    for engine in ending:
        for process in engine.processes if isinstance(engine, RouterTopology) else (engine,):
            process.terminate()


@pytest.fixture(scope="session")
def starts() -> Iterator[StartQueue]:
    queue = StartQueue()
    try:
        yield queue
    finally:
        queue.close()


@pytest.fixture(scope="session")
def sglang_server_start(
    tmp_path_factory: pytest.TempPathFactory, shutdowns: Shutdowns, starts: StartQueue
) -> Iterator[Future[ServerProcess]]:
    """SGLang's own HTTP server on the embedded model, with the CPU compatibility pieces, in the
    start queue."""
    process = ServerProcess(
        tmp_path_factory.mktemp("sglang") / "sglang.log", *MODEL_ARGS, command="sglang-server"
    )

    def ready() -> ServerProcess:
        process.wait_for("/health_generate")
        return process

    try:
        yield starts.submit([process], ready)
    finally:
        starts.stop_later([process], shutdowns)
        shutdowns.report_later(
            lambda: print(f"\n--- SGLang server log tail ---\n{process.log_tail(30)}")
        )


@pytest.fixture(scope="session")
def sglang_server(sglang_server_start: Future[ServerProcess]) -> ServerProcess:
    return sglang_server_start.result()


@pytest.fixture(scope="session")
def router_topology_start(
    tmp_path_factory: pytest.TempPathFactory, shutdowns: Shutdowns, starts: StartQueue
) -> Iterator[Future[RouterTopology]]:
    """sglang-router (cache-aware) in front of two SGLang workers on the embedded model, in the
    start queue."""
    folder = tmp_path_factory.mktemp("router")
    topology = topology_of(folder, *MODEL_ARGS)
    try:
        yield starts.submit(topology.processes, lambda: wait_started(topology))
    finally:
        starts.stop_later(topology.processes, shutdowns)
        shutdowns.report_later(lambda: print_topology_logs(folder))


@pytest.fixture(scope="session")
def router_topology(router_topology_start: Future[RouterTopology]) -> RouterTopology:
    return router_topology_start.result()


def print_topology_logs(folder: Path) -> None:
    for log in sorted(folder.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        kept = [line for line in lines if not line.startswith((" - ", "nanobind", "See "))]
        tail = "\n".join(kept[-15:])  # triton's exit-time nanobind report left out
        print(f"\n--- {log.name} tail ---\n{tail}")


@pytest.fixture(scope="session")
def server(
    engine: str,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    shutdowns: Shutdowns,
) -> Iterator[ServerProcess]:
    args: tuple[str, ...] = MODEL_ARGS
    if engine == "sglang-remote":
        remote: ServerProcess = request.getfixturevalue("sglang_server")
        args += ("--engine", "sglang-remote", "--engine-url", remote.origin)
    elif engine == "sglang-router":
        topology: RouterTopology = request.getfixturevalue("router_topology")
        args += ("--engine", "sglang-remote", "--engine-url", topology.url)
    process = ServerProcess(tmp_path_factory.mktemp("server") / "server.log", *args)
    try:
        with process.running(shutdowns=shutdowns):
            yield process
    finally:
        shutdowns.report_later(lambda: print(f"\n--- server log tail ---\n{process.log_tail(30)}"))


@pytest.fixture(scope="session")
def model(server: ServerProcess) -> str:
    with httpx.Client() as client:
        return str(client.get(f"{server.base_url}/models").json()["data"][0]["id"])


# A read may wait this long: a prompt the size of the window (the fuzz tests' hostile members
# make some) prefills for over 2 minutes on a slow 2-core machine. Not a speed bound.
READ_TIMEOUT_S = 300


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    """Raw HTTP/1.1 against the server, at its origin."""
    with httpx.Client(base_url=server.origin, timeout=READ_TIMEOUT_S) as client:
        yield client


@pytest.fixture
def http2(server: ServerProcess) -> Iterator[httpx.Client]:
    """Cleartext HTTP/2 with prior knowledge."""
    with httpx.Client(
        base_url=server.origin, timeout=READ_TIMEOUT_S, http2=True, http1=False
    ) as client:
        yield client


@pytest.fixture
def anthropic_client(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, auth_token="x", max_retries=0)


@pytest.fixture
def openai_client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent
