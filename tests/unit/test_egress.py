"""The egress guard against every address class, with resolution under the test's control, and
against a real local HTTPS server (trusted through a test CA): redirects to refused addresses or
to plain http, redirect loops, bodies over the limit (stopped while streaming), slow servers."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest

from server.errors import EgressDenied, InvalidRequest
from server.images.egress import EgressGuard, refusal
from tests.api.conventions import wait_for
from tests.image_server import BODY, ImageServer, resolver

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
WHERE = "messages.0.content.0.source.url"

REFUSED = [
    "0.0.0.0",
    "10.1.2.3",
    "100.64.0.1",  # carrier-grade NAT
    "127.0.0.1",
    "169.254.169.254",  # cloud metadata
    "172.16.5.4",
    "192.0.0.192",  # Oracle Cloud metadata
    "192.168.1.1",
    "198.18.0.1",
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "::",
    "::1",
    "fe80::1",
    "fc00::1",
    "fd00:ec2::254",  # AWS metadata over IPv6
    "ff02::1",
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:169.254.169.254",
    "::ffff:10.0.0.1",
    "64:ff9b::a9fe:a9fe",  # NAT64 of the metadata address
    "::7f00:1",  # IPv4-compatible loopback
    "2002:7f00:1::",  # 6to4 of loopback
    "2001:db8::1",
]
ALLOWED = ["8.8.8.8", "93.184.215.14", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("address", REFUSED)
def test_each_refused_address_class(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_pass(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize("address", REFUSED)
def test_a_host_resolving_to_a_refused_address_is_never_connected(address: str) -> None:
    guard = EgressGuard(resolver=resolver({"evil.test": [address]}))
    with pytest.raises(EgressDenied, match=r"evil\.test resolves to"):
        asyncio.run(guard.fetch("https://evil.test/cat.png", WHERE))


def test_one_refused_address_among_public_ones_refuses_the_host() -> None:
    guard = EgressGuard(resolver=resolver({"mixed.test": ["8.8.8.8", "10.0.0.1"]}))
    with pytest.raises(EgressDenied):
        asyncio.run(guard.fetch("https://mixed.test/cat.png", WHERE))


@pytest.mark.parametrize(
    "url", ["http://example.com/a.png", "ftp://example.com/a.png", "https://u:p@example.com/a"]
)
def test_only_plain_https_urls(url: str) -> None:
    with pytest.raises(EgressDenied):
        asyncio.run(EgressGuard(resolver=resolver({})).fetch(url, WHERE))


def test_literal_addresses_are_checked_too() -> None:
    guard = EgressGuard(resolver=resolver({}))
    for url in ("https://127.0.0.1/a.png", "https://[::1]/a.png", "https://169.254.169.254/"):
        with pytest.raises(EgressDenied):
            asyncio.run(guard.fetch(url, WHERE))


def test_a_host_that_does_not_resolve() -> None:
    with pytest.raises(InvalidRequest, match="does not resolve"):
        asyncio.run(EgressGuard(resolver=resolver({})).fetch("https://nowhere.test/", WHERE))


# --- against a real HTTPS server on loopback ----------------------------------------------------


@pytest.fixture(scope="module")
def https_server() -> Iterator[ImageServer]:
    with ImageServer() as server:
        yield server


def local_guard(server: ImageServer) -> EgressGuard:
    return server.guard(read_timeout=0.5)


def test_fetches_over_https_from_the_checked_address(https_server: Any) -> None:
    server = https_server
    fetched = asyncio.run(local_guard(server).fetch(server.url("/to-ok"), WHERE))
    assert fetched.data == BODY
    assert fetched.content_type == "image/png"
    assert fetched.url.endswith("/ok.png")


def test_the_default_guard_refuses_the_same_server_on_loopback(https_server: Any) -> None:
    server = https_server
    guard = EgressGuard(resolver=server.resolver, ssl_context=server.trust)
    with pytest.raises(EgressDenied, match=r"127\.0\.0\.0/8"):
        asyncio.run(guard.fetch(server.url("/ok.png"), WHERE))


@pytest.mark.parametrize("path", ["/to-private", "/to-metadata", "/to-http"])
def test_each_redirect_is_checked(https_server: Any, path: str) -> None:
    server = https_server
    with pytest.raises(EgressDenied):
        asyncio.run(local_guard(server).fetch(server.url(path), WHERE))


def test_redirect_loops_end(https_server: Any) -> None:
    server = https_server
    with pytest.raises(InvalidRequest, match="redirects"):
        asyncio.run(local_guard(server).fetch(server.url("/loop"), WHERE))


def test_a_body_over_the_limit_is_cut_while_streaming(https_server: Any) -> None:
    server = https_server
    guard = local_guard(server)
    with pytest.raises(InvalidRequest, match="larger than 10485760 bytes"):
        asyncio.run(guard.fetch(server.url("/big"), WHERE))
    # The reader dropped the connection: the server, still writing, fails (in its own thread).
    wait_for(lambda: server.cut_short, timeout=20)
    with pytest.raises(InvalidRequest, match="larger than"):
        asyncio.run(guard.fetch(server.url("/big-declared"), WHERE))


def test_a_slow_server_times_out(https_server: Any) -> None:
    server = https_server
    with pytest.raises(InvalidRequest, match="timed out"):
        asyncio.run(local_guard(server).fetch(server.url("/slow"), WHERE))


def test_the_certificate_is_checked_against_the_url_host(https_server: Any) -> None:
    server = https_server
    guard = local_guard(server)
    guard.resolver = resolver({"other.test": ["127.0.0.1"]})  # cert is for images.test
    other = server.url("/ok.png").replace("images.test", "other.test")
    with pytest.raises(InvalidRequest, match="could not be fetched"):
        asyncio.run(guard.fetch(other, WHERE))
