"""The egress guard: fetching an image URL on a user's behalf without being talked into reaching
the node's own network. `https://` only; the host is resolved here and every address it resolves
to is checked against the refused ranges (private, loopback, link-local, unique-local, multicast,
reserved, carrier-grade NAT, cloud metadata; IPv4, IPv6 and IPv4 inside IPv6); the connection
then goes to the address that was checked, with the URL's host name only for TLS (SNI and the
certificate) and the Host header, so a second lookup cannot rebind it. Every redirect is checked
the same way; connect and read time out; the body stops at `max_bytes` while it streams."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpcore

from server.errors import EgressDenied, InvalidRequest

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]

MAX_IMAGE_BYTES = 10 * 1024 * 1024
MAX_REDIRECTS = 5
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 10.0
USER_AGENT = "b3os-infer image fetcher"

REFUSED_NETWORKS: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(net)
    for net in (
        # IPv4
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",  # private
        "100.64.0.0/10",  # carrier-grade NAT
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, with the cloud metadata address 169.254.169.254
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments (192.0.0.192: Oracle Cloud metadata)
        "192.0.2.0/24",  # documentation
        "192.88.99.0/24",  # 6to4 relay anycast
        "192.168.0.0/16",  # private
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation
        "203.0.113.0/24",  # documentation
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the broadcast address
        # IPv6
        "::/128",  # unspecified
        "::1/128",  # loopback
        "64:ff9b:1::/48",  # local-use IPv4/IPv6 translation
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments (Teredo, benchmarking, ORCHID)
        "2001:db8::/32",  # documentation
        "2002::/16",  # 6to4: embeds any IPv4 address
        "fc00::/7",  # unique-local
        "fd00:ec2::254/128",  # AWS metadata over IPv6 (inside fc00::/7 too)
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
)


def refusal(address: IPAddress, refused: Iterable[IPNetwork] = REFUSED_NETWORKS) -> str | None:
    """Why `address` may not be reached, or None. IPv4 carried in IPv6 (mapped `::ffff:a.b.c.d`,
    translated `64:ff9b::a.b.c.d`, compatible `::a.b.c.d`) is judged as the IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            reason = refusal(embedded, refused)
            return None if reason is None else f"{reason} (inside {address})"
    for network in refused:
        if address.version == network.version and address in network:
            return f"{address} is in {network}, which this node does not fetch from"
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    packed = address.packed
    if packed[:12] == bytes(12) and packed[12:] != bytes(4) and address != ipaddress.IPv6Address(1):
        return ipaddress.IPv4Address(packed[12:])  # ::a.b.c.d (deprecated IPv4-compatible)
    if address in ipaddress.IPv6Network("64:ff9b::/96"):
        return ipaddress.IPv4Address(packed[12:])  # NAT64 well-known prefix
    return None


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return [ipaddress.ip_address(info[4][0]) for info in infos]


@dataclass(frozen=True, slots=True)
class Fetched:
    data: bytes
    content_type: str | None
    url: str  # after redirects


@dataclass
class EgressGuard:
    resolver: Resolver = system_resolver
    refused: Sequence[IPNetwork] = REFUSED_NETWORKS
    ssl_context: ssl.SSLContext | None = None  # None: the system's trust store
    max_bytes: int = MAX_IMAGE_BYTES
    connect_timeout: float = CONNECT_TIMEOUT_S
    read_timeout: float = READ_TIMEOUT_S
    _backend: httpcore.AsyncNetworkBackend = field(default_factory=httpcore.AnyIOBackend)

    async def fetch(self, url: str, where: str) -> Fetched:
        """The body at `url`, following checked redirects. `where` names the image in errors:
        403 egress_denied for a refused destination, 400 for everything else."""
        pool = httpcore.AsyncConnectionPool(
            ssl_context=self.ssl_context,
            network_backend=_CheckedBackend(self, where),
            max_connections=4,
            retries=0,
        )
        try:
            async with pool:
                for _ in range(MAX_REDIRECTS + 1):
                    _check_url(url, where)
                    fetched, location = await self._get(pool, url, where)
                    if fetched is not None:
                        return fetched
                    url = urljoin(url, location)
        except httpcore.TimeoutException:
            raise InvalidRequest(f"{where}: fetching the image timed out", param=where) from None
        except (httpcore.NetworkError, httpcore.ProtocolError, ssl.SSLError, OSError) as exc:
            raise InvalidRequest(
                f"{where}: the image could not be fetched ({type(exc).__name__})", param=where
            ) from None
        raise InvalidRequest(f"{where}: more than {MAX_REDIRECTS} redirects", param=where)

    async def _get(
        self, pool: httpcore.AsyncConnectionPool, url: str, where: str
    ) -> tuple[Fetched | None, str]:
        """The fetched image, or None and the redirect's location."""
        timeout = {
            "connect": self.connect_timeout,
            "read": self.read_timeout,
            "write": self.read_timeout,
            "pool": self.connect_timeout,
        }
        headers = [(b"User-Agent", USER_AGENT.encode()), (b"Accept", b"image/*")]
        async with pool.stream(
            "GET", url, headers=headers, extensions={"timeout": timeout}
        ) as response:
            found = {k.decode().lower(): v.decode("latin-1") for k, v in response.headers}
            if response.status in (301, 302, 303, 307, 308) and "location" in found:
                return None, found["location"]
            if response.status != 200:
                raise InvalidRequest(
                    f"{where}: the image URL answered HTTP {response.status}", param=where
                )
            length = found.get("content-length")
            if length is not None and length.isdigit() and int(length) > self.max_bytes:
                raise self._too_large(where)
            body = bytearray()
            async for chunk in response.aiter_stream():
                body += chunk
                if len(body) > self.max_bytes:
                    raise self._too_large(where)  # stop reading: the connection is dropped
            return Fetched(bytes(body), found.get("content-type"), url), ""

    def _too_large(self, where: str) -> InvalidRequest:
        return InvalidRequest(
            f"{where}: the image is larger than {self.max_bytes} bytes", param=where
        )


def _check_url(url: str, where: str) -> None:
    parts = urlsplit(url)
    if parts.scheme != "https":
        raise EgressDenied(f"{where}: only https:// image URLs are fetched, not {url!r}")
    if not parts.hostname:
        raise InvalidRequest(f"{where}: {url!r} has no host", param=where)
    if parts.username or parts.password:
        raise EgressDenied(f"{where}: image URLs may not carry credentials")


class _CheckedBackend(httpcore.AsyncNetworkBackend):
    """Resolves the host itself, refuses if any address is refused, and connects to the address
    it checked; TLS still verifies the URL's host name (httpcore passes it as SNI)."""

    def __init__(self, guard: EgressGuard, where: str) -> None:
        self._guard = guard
        self._where = where

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self._resolve(host, port)
        for address in addresses:
            reason = refusal(address, self._guard.refused)
            if reason is not None:
                raise EgressDenied(f"{self._where}: {host} resolves to {reason}")
        return await self._guard._backend.connect_tcp(
            str(addresses[0]), port, timeout, local_address, socket_options
        )

    async def _resolve(self, host: str, port: int) -> list[IPAddress]:
        try:
            literal = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            pass
        else:
            return [literal]
        try:
            addresses = await asyncio.wait_for(
                self._guard.resolver(host, port), self._guard.connect_timeout
            )
        except (OSError, TimeoutError):
            addresses = []
        if not addresses:
            raise InvalidRequest(
                f"{self._where}: the image host {host} does not resolve", param=self._where
            )
        return addresses

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
