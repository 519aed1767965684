"""The server's Prometheus metrics (`GET /metrics`), in a registry of their own: SGLang's
in-process metrics live in prometheus-client's global registry and are not mixed in. Requests
are counted by `route` (the URL rule matched), latencies by `api` (messages, chat.completions)."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE  # noqa: F401 (re-exported)
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from server.requestlog import RequestRecord

# Seconds: from sub-millisecond front-end phases to minutes-long answers.
LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75,
    1.0, 1.5, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0,
)  # fmt: skip
ITL_BUCKETS = (0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.06, 0.08, 0.1, 0.15, 0.25, 0.5, 1.0)
GRAMMAR_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "b3os_infer_requests",
            "Requests answered, by route, HTTP status and B3OS code (none when it succeeded)",
            ["route", "status", "code"],
            registry=r,
        )
        self.ttft = Histogram(
            "b3os_infer_time_to_first_token_seconds",
            "From the request head to the first generated token",
            ["api"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "b3os_infer_inter_token_latency_seconds",
            "Between generated tokens of one answer (an output of several tokens counts each)",
            ["api"],
            buckets=ITL_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "b3os_infer_e2e_seconds",
            "From the request head to the answer's end",
            ["api"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue = Histogram(
            "b3os_infer_queue_seconds",
            "Waiting in the model runtime's queue, where the runtime reports it",
            ["api"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.grammar = Histogram(
            "b3os_infer_grammar_seconds",
            "Building a request's grammar (tool calls, JSON formats, thinking budget); "
            "xgrammar's compile runs in the runtime, cached, and shows in the time to first token",
            ["api"],
            buckets=GRAMMAR_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter(
            "b3os_infer_prompt_tokens", "Prompt tokens of answered requests", ["model"], registry=r
        )
        self.completion_tokens = Counter(
            "b3os_infer_completion_tokens", "Generated tokens", ["model"], registry=r
        )
        self.cached_tokens = Counter(
            "b3os_infer_prefix_cached_tokens",
            "Prompt tokens served from the prefix cache (RadixAttention)",
            ["model"],
            registry=r,
        )
        self.prefix_hit_ratio = Gauge(
            "b3os_infer_prefix_cache_hit_ratio",
            "Of the prompt tokens of answers since start, the share served from the prefix cache",
            ["model"],
            registry=r,
        )
        self._prompted: dict[str, tuple[int, int]] = {}  # model -> (prompt, cached) tokens
        self.in_flight = Gauge(
            "b3os_infer_requests_in_flight", "Infer requests being answered", registry=r
        )
        self.engine_restarts = Gauge(
            "b3os_infer_engine_restarts",
            "Times this server restarted its in-process model runtime after it died",
            registry=r,
        )
        self.engine_running = Gauge(
            "b3os_infer_engine_requests",
            "Requests at the model runtime (running or queued), all its clients' "
            "(-1: the runtime does not say)",
            registry=r,
        )
        self.engine_queue = Gauge(
            "b3os_infer_engine_queue_depth",
            "Requests waiting in the model runtime's queue (-1: the runtime does not say)",
            registry=r,
        )

    def answered(self, route: str, status: int, code: str | None) -> None:
        """A response ended: a JSON body written, an error, a stream's last event."""
        self.requests.labels(route, str(status), code or "").inc()

    def ended(self, record: RequestRecord) -> None:
        """An answer that reached the engine ended (finished, failed or abandoned)."""
        phases = record.timing.phases
        api = record.route  # messages or chat.completions
        for histogram, phase in (
            (self.ttft, "ttft"),
            (self.queue, "queue"),
            (self.grammar, "grammar"),
        ):
            if phase in phases:
                histogram.labels(api).observe(phases[phase] / 1000)
        self.e2e.labels(api).observe(record.timing.since_start() / 1000)
        self.prompt_tokens.labels(record.model).inc(record.prompt_tokens)
        self.completion_tokens.labels(record.model).inc(record.completion_tokens)
        self.cached_tokens.labels(record.model).inc(record.cached_tokens)
        prompt, cached = self._prompted.get(record.model, (0, 0))
        prompt, cached = prompt + record.prompt_tokens, cached + record.cached_tokens
        self._prompted[record.model] = prompt, cached
        if prompt:
            self.prefix_hit_ratio.labels(record.model).set(cached / prompt)

    def render(self) -> bytes:
        return generate_latest(self.registry)
