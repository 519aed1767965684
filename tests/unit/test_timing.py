"""Server-Timing values."""

from __future__ import annotations

import time

from server.timing import Timing


def test_header_lists_phases_in_order_with_millisecond_durations() -> None:
    timing = Timing(started=time.perf_counter())
    timing.phases.update({"template": 0.4123, "ttft": 118.2})
    assert timing.header() == "template;dur=0.412, ttft;dur=118.200"


def test_mark_measures_from_the_request_head() -> None:
    timing = Timing(started=time.perf_counter() - 0.05)
    timing.mark("total")
    assert timing.phases["total"] >= 50
