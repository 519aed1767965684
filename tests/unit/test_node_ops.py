"""Keys, limits and admission as pure logic: the key format and its checksum, the limits file,
and the rate windows under a clock the test moves (the real server is in tests/api/test_node.py)."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from server.auth.keys import CHECKSUM_CHARS, PREFIX, KeyFormatError, new_key, parse
from server.errors import ConcurrencyLimited, InvalidRequest, RateLimited
from server.ids import CROCKFORD, encode_crockford
from server.node.admission import Admission
from server.node.limits import Limits, LimitsConfig, LimitsFileError, load
from server.store.base import KeyRecord, UsageRecord
from server.store.sqlite import SqliteStore


def test_a_new_key_has_the_documented_shape_and_checksum() -> None:
    key = new_key()
    head, _, check = key.rpartition("_")
    assert head.startswith(PREFIX)
    body = head[len(PREFIX) :]
    assert len(body) == 32
    assert set(body) <= set(CROCKFORD)
    assert check == encode_crockford(zlib.crc32(head.encode()), CHECKSUM_CHARS)
    assert parse(key).key_id == "key_" + body[:8]
    assert new_key() != key


def test_a_mistyped_or_cut_key_is_refused_before_any_lookup() -> None:
    key = new_key()
    at = len(PREFIX) + 3
    typo = key[:at] + ("0" if key[at] != "0" else "1") + key[at + 1 :]
    with pytest.raises(KeyFormatError, match="checksum does not match"):
        parse(typo)
    with pytest.raises(KeyFormatError, match="malformed"):
        parse(key[:-1])
    with pytest.raises(KeyFormatError, match="malformed"):
        parse("sk-" + key)


def test_limits_file_layers_over_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "limits.toml"
    path.write_text(
        "[default]\nrequests_per_minute = 100\n"
        "[orgs.acme]\ntokens_per_minute = 500\n"
        '[orgs.acme.models."m"]\nrequests_per_minute = 7\n'
    )
    config = load(path)
    assert config.for_model("zeta", "m") == Limits(requests_per_minute=100)
    assert config.for_model("acme", "x") == Limits(100, 500)
    assert config.for_model("acme", "m") == Limits(7, 500)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[default]\nrequests_per_hour = 1\n", "unknown limits"),
        ("[default]\nrequests_per_minute = -1\n", "whole number"),
        ("[defaults]\n", "unknown tables"),
        ("[default\n", "limits.toml"),
    ],
)
def test_a_bad_limits_file_says_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "limits.toml"
    path.write_text(text)
    with pytest.raises(LimitsFileError, match=message):
        load(path)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_requests_per_minute_reset_on_the_minute() -> None:
    clock = Clock(1_000_040.0)  # 20 s into a minute: 40 s before it turns
    admission = Admission(LimitsConfig(Limits(requests_per_minute=2)), clock)
    first = admission.admit("o", "m", 10, 0)
    assert first.headers == {
        "RateLimit-Limit": "2",
        "RateLimit-Remaining": "1",
        "RateLimit-Reset": "40",
    }
    admission.admit("o", "m", 10, 0)
    with pytest.raises(RateLimited) as refused:
        admission.admit("o", "m", 10, 0)
    assert refused.value.headers() == {
        "RateLimit-Limit": "2",
        "RateLimit-Remaining": "0",
        "RateLimit-Reset": "40",
        "Retry-After": "40",
    }
    admission.admit("other", "m", 10, 0)  # per organization
    clock.now += 40
    assert admission.admit("o", "m", 10, 0).headers["RateLimit-Remaining"] == "1"


def test_tokens_are_charged_then_settled() -> None:
    admission = Admission(LimitsConfig(Limits(tokens_per_minute=100)), Clock(60.0))
    ticket = admission.admit("o", "m", 90, 0)
    with pytest.raises(RateLimited, match="100 tokens per minute"):
        admission.admit("o", "m", 20, 0)
    ticket.settle(15)
    admission.admit("o", "m", 80, 0)  # 15 + 80 fits once settled
    with pytest.raises(RateLimited, match="retry in"):
        admission.admit("o", "m", 90, 10)  # fits a minute, not this one


def test_what_no_minute_could_hold_is_a_400_never_a_429() -> None:
    admission = Admission(LimitsConfig(Limits(tokens_per_minute=100)), Clock(60.0))
    with pytest.raises(InvalidRequest, match=r"needs 101 tokens \(its prompt 1 and max") as no:
        admission.admit("o", "m", 1, 100)
    assert no.value.status == 400 and no.value.param == "max_tokens"
    assert no.value.retry_after is None
    with pytest.raises(InvalidRequest) as no:
        admission.admit("o", "m", 101, 0)
    assert no.value.param == "messages"
    with pytest.raises(InvalidRequest, match="smaller"):
        Admission(LimitsConfig(Limits(image_bytes_per_minute=10)), Clock(0.0)).charge_image_bytes(
            "o", "m", 11
        )
    assert admission.admit("o", "m", 50, 50).charged_tokens == 100  # exactly a minute's worth


def test_requests_in_flight_are_held_until_released() -> None:
    admission = Admission(LimitsConfig(Limits(requests_in_flight=1)), Clock(0.0))
    ticket = admission.admit("o", "m", 1, 0)
    with pytest.raises(ConcurrencyLimited) as refused:
        admission.admit("o", "n", 1, 0)  # per organization, whatever the model
    assert refused.value.retry_after == 1
    ticket.release()
    ticket.release()  # once only
    assert admission.in_flight("o") == 0
    admission.admit("o", "m", 1, 0)


def test_the_store_keeps_hashes_and_metering(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    key = parse(new_key())
    store.add_key(KeyRecord(key.key_id, key.hash, "o", "p", ("infer:run",), 1.0))
    found = store.key_by_hash(key.hash)
    assert found is not None
    assert found.scopes == ("infer:run",)
    assert key.text not in (tmp_path / "s.db").read_bytes().decode(errors="replace")
    record = UsageRecord("req_1", key.key_id, "o", "p", "m", "chat", 10, 3, "running", 1.0, 1.0)
    store.write([record], [])
    assert store.interrupt_running() == 1
    assert store.usage()[0].status == "interrupted"
    assert store.key_spend(key.key_id) == 13
    assert store.revoke_key(key.key_id)
    assert not store.revoke_key(key.key_id)
    store.close()
