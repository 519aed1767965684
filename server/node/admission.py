"""Admission: whether a request may start now, per organization and model, against its limits.

Requests and tokens per minute count in fixed one-minute windows of the wall clock (the window
resets on the minute); a request is charged its estimated prompt plus its answer's token budget
when admitted and settled with the real counts when it ends. Requests in flight count per
organization. A refusal is a 429 with `Retry-After` (the seconds to the window's end, at most
60; 1 for concurrency) and `RateLimit-Limit`, `-Remaining`, `-Reset` for the limit that refused;
an admitted request carries the same headers for its requests-per-minute limit. A request no
window could ever hold (more tokens, or a larger image, than a whole minute allows) is a 400
that says so: retrying it would never help."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from server.errors import ConcurrencyLimited, InvalidRequest, RateLimited
from server.node.limits import LimitsConfig

WINDOW_S = 60


@dataclass(slots=True)
class _Window:
    start: float
    requests: int = 0
    tokens: int = 0
    image_bytes: int = 0


@dataclass(slots=True)
class Ticket:
    """An admitted request's hold on its limits, until `release()`."""

    admission: Admission
    org: str
    model: str
    window: _Window
    charged_tokens: int
    headers: dict[str, str] = field(default_factory=dict)
    released: bool = False

    def settle(self, tokens: int) -> None:
        """The real count replaces the estimate, in the window that was charged."""
        self.window.tokens += tokens - self.charged_tokens
        self.charged_tokens = tokens

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.admission.leave(self.org)


class Admission:
    def __init__(self, config: LimitsConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._clock = clock
        self._windows: dict[tuple[str, str], _Window] = {}
        self._in_flight: dict[str, int] = {}

    def in_flight(self, org: str) -> int:
        return self._in_flight.get(org, 0)

    def leave(self, org: str) -> None:
        """A request of `org` ended (its ticket's release)."""
        self._in_flight[org] -= 1

    def admit(self, org: str, model: str, prompt_tokens: int, answer_tokens: int) -> Ticket:
        """Charges one request and its estimated tokens, or refuses with 429 (400 where no
        window could hold them)."""
        limits = self.config.for_model(org, model)
        tokens = prompt_tokens + answer_tokens
        tpm = limits.tokens_per_minute
        if tokens > tpm:
            raise InvalidRequest(
                f"this request needs {tokens} tokens (its prompt {prompt_tokens} and max_tokens "
                f"{answer_tokens}), more than the {tpm} tokens per minute allowed on {model}: "
                "lower max_tokens or the prompt",
                param="max_tokens" if prompt_tokens < tpm else "messages",
            )
        window, reset = self._window(org, model)
        in_flight = self.in_flight(org)
        if in_flight >= self.config.for_org(org).requests_in_flight:
            cap = self.config.for_org(org).requests_in_flight
            raise ConcurrencyLimited(
                f"{cap} requests in flight allowed for {org}; retry in 1 second",
                retry_after=1,
                headers=_headers(cap, 0, 1),
            )
        rpm = limits.requests_per_minute
        if window.requests >= rpm:
            raise RateLimited(
                f"{rpm} requests per minute allowed on {model}; retry in {reset} seconds",
                retry_after=reset,
                headers=_headers(rpm, 0, reset),
            )
        if window.tokens + tokens > tpm:
            raise RateLimited(
                f"{tpm} tokens per minute allowed on {model}; retry in {reset} seconds",
                retry_after=reset,
                headers=_headers(tpm, tpm - window.tokens, reset),
            )
        window.requests += 1
        window.tokens += tokens
        self._in_flight[org] = in_flight + 1
        headers = _headers(rpm, rpm - window.requests, reset)
        return Ticket(self, org, model, window, tokens, headers)

    def charge_image_bytes(self, org: str, model: str, size: int) -> None:
        """Remote image bytes fetched for the organization, or 429 once over its limit."""
        limit = self.config.for_model(org, model).image_bytes_per_minute
        if size > limit:
            raise InvalidRequest(
                f"a remote image of {size} bytes, more than the {limit} bytes of remote images "
                f"per minute allowed on {model}: send a smaller one"
            )
        window, reset = self._window(org, model)
        if window.image_bytes + size > limit:
            raise RateLimited(
                f"{limit} bytes of remote images per minute allowed on {model}; "
                f"retry in {reset} seconds",
                retry_after=reset,
                headers=_headers(limit, max(0, limit - window.image_bytes), reset),
            )
        window.image_bytes += size

    def _window(self, org: str, model: str) -> tuple[_Window, int]:
        """The current window of (org, model) and the whole seconds until it resets (1-60)."""
        now = self._clock()
        start = now - now % WINDOW_S
        window = self._windows.get((org, model))
        if window is None or window.start != start:
            window = self._windows[(org, model)] = _Window(start)
        return window, max(1, math.ceil(start + WINDOW_S - now))


def _headers(limit: int, remaining: int, reset: int) -> dict[str, str]:
    return {
        "RateLimit-Limit": str(limit),
        "RateLimit-Remaining": str(max(0, remaining)),
        "RateLimit-Reset": str(reset),
    }
