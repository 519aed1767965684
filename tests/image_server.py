"""A real HTTPS server on loopback for image fetching tests, its certificate (for images.test and
private.test) from a test CA, and an egress guard that trusts that CA, resolves images.test to
the server and private.test to a private address, and allows loopback only (where the server
lives): every other refused range stays refused."""

from __future__ import annotations

import contextlib
import http.server
import io
import ipaddress
import ssl
import threading
import time
from typing import Any

import trustme
from PIL import Image

from server.images.egress import REFUSED_NETWORKS, EgressGuard, IPAddress, Resolver

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
BODY = b"\x89PNG fake but fetched"
BIG = 64 * 1024 * 1024  # far past the 10 MiB cap and any socket buffer: the server must see the cut


def png(width: int, height: int, color: str = "navy") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, format="PNG")
    return out.getvalue()


PHOTO = png(1600, 1200)  # 1.9 megapixels: scaled on the way in


def resolver(table: dict[str, list[str]]) -> Resolver:
    async def resolve(host: str, port: int) -> list[IPAddress]:
        del port
        return [ipaddress.ip_address(a) for a in table.get(host, [])]

    return resolve


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # a body without a length runs until the connection closes
    server: _Server

    def do_GET(self) -> None:
        routes = {
            "/ok.png": lambda: self._send(BODY),
            "/photo.png": lambda: self._send(PHOTO),
            "/to-private": lambda: self._redirect("https://private.test/x.png"),
            "/to-metadata": lambda: self._redirect("https://169.254.169.254/latest/meta-data"),
            "/to-http": lambda: self._redirect("http://images.test/ok.png"),
            "/to-ok": lambda: self._redirect("/ok.png"),
            "/loop": lambda: self._redirect("/loop"),
            "/big": self._big,
            "/big-declared": self._big_declared,
            "/slow": self._slow,
        }
        self.server.requests.append(self.path)
        routes.get(self.path, lambda: self.send_error(404))()

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.end_headers()

    def _big(self) -> None:
        self.send_response(200)
        self.end_headers()
        chunk = b"x" * 65536
        try:
            for _ in range(BIG // len(chunk)):
                self.wfile.write(chunk)
        except OSError:
            self.server.cut_short = True

    def _big_declared(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(BIG))
        self.end_headers()

    def _slow(self) -> None:
        time.sleep(1.5)
        with contextlib.suppress(OSError):  # the client gave up first, as it should
            self._send(BODY)

    def log_message(self, *args: Any) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    requests: list[str]
    cut_short: bool


class ImageServer:
    def __init__(self) -> None:
        ca = trustme.CA()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("images.test", "private.test").configure_cert(context)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._server.requests = []
        self._server.cut_short = False
        self.trust = ssl.create_default_context()
        ca.configure_trust(self.trust)
        self.resolver = resolver({"images.test": ["127.0.0.1"], "private.test": ["10.20.30.40"]})
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> ImageServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()

    @property
    def cut_short(self) -> bool:
        return self._server.cut_short

    @property
    def requests(self) -> list[str]:
        return self._server.requests

    def url(self, path: str) -> str:
        return f"https://images.test:{self._server.server_address[1]}{path}"

    def guard(self, **options: Any) -> EgressGuard:
        refused = [n for n in REFUSED_NETWORKS if n != LOOPBACK]
        return EgressGuard(
            resolver=self.resolver, refused=refused, ssl_context=self.trust, **options
        )
