"""`make test`'s verdict over the suite's shards (tests/shards.py): a failure in either fails the
run, and a selection that one shard has nothing of is not a failure unless neither has any."""

from __future__ import annotations

import pytest

from tests.shards import NO_TESTS, verdict


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ([0, 0], 0),
        ([0, NO_TESTS], 0),
        ([NO_TESTS, 0], 0),
        ([NO_TESTS, NO_TESTS], NO_TESTS),
        ([1, 0], 1),
        ([0, 1], 1),
        ([NO_TESTS, 2], 2),
        ([0, -9], -9),  # a shard killed by a signal
    ],
)
def test_the_run_fails_when_a_shard_fails(codes: list[int], expected: int) -> None:
    assert verdict(codes) == expected
