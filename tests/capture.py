"""What a client really sends, kept. `capturing`: a stand-in for the Messages API on a loopback
port that answers with the smallest valid message (streamed when asked), so that a client such as
Claude Code runs to its end; what was captured is replayed against the real server. `recording`:
a proxy in front of the real server, so that a client's live requests are kept as they are
served (Codex, opencode)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

MESSAGE = {
    "id": "msg_captured",
    "type": "message",
    "role": "assistant",
    "model": "captured",
    "content": [{"type": "text", "text": "Done."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def _events() -> bytes:
    start = {**MESSAGE, "content": [], "stop_reason": None}
    text = {"type": "text", "text": ""}
    delta = {"type": "text_delta", "text": "Done."}
    end = {"stop_reason": "end_turn"}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": text},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": end, "usage": {"output_tokens": 1}},
        {"type": "message_stop"},
    ]
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


class _Handler(BaseHTTPRequestHandler):
    server: _CaptureServer

    def do_POST(self) -> None:
        size = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(size) or b"{}")
        self.server.captured.append((self.path, body))
        if "count_tokens" in self.path:
            payload, kind = json.dumps({"input_tokens": 1}).encode(), "application/json"
        elif body.get("stream"):
            payload, kind = _events(), "text/event-stream"
        else:
            payload, kind = json.dumps(MESSAGE).encode(), "application/json"
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        del format, args  # quiet


class _CaptureServer(ThreadingHTTPServer):
    captured: list[tuple[str, Any]]


class _ForwardHandler(BaseHTTPRequestHandler):
    """Keeps each body and passes the request to the real server, its answer back as it comes
    (a stream stays a stream)."""

    server: _RecordingServer
    protocol_version = "HTTP/1.0"  # the answer ends when the connection closes

    def do_POST(self) -> None:
        size = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(size)
        with self.server.lock:
            index = len(self.server.captured)
            self.server.captured.append((self.path, json.loads(raw or b"{}")))
        headers = {k: v for k, v in self.headers.items() if k.lower() in _FORWARDED}
        url = self.server.upstream + self.path
        with httpx.stream("POST", url, content=raw, headers=headers, timeout=900) as answer:
            self.server.request_ids[index] = answer.headers.get("x-request-id")
            self.send_response(answer.status_code)
            self.send_header("content-type", answer.headers.get("content-type", ""))
            self.end_headers()
            for chunk in answer.iter_raw():
                self.wfile.write(chunk)
                self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


_FORWARDED = ("authorization", "content-type", "accept", "x-api-key", "anthropic-version",
              "anthropic-beta")  # fmt: skip


class _RecordingServer(ThreadingHTTPServer):
    captured: list[tuple[str, Any]]
    request_ids: dict[int, str | None]  # by index in captured: the upstream's x-request-id
    upstream: str
    lock: threading.Lock


@contextmanager
def recording(upstream: str) -> Iterator[_RecordingServer]:
    """A proxy on a free port in front of `upstream` (the real server's origin): `.captured`
    holds (path, body) of what went through it, in arrival order, and `.request_ids` the
    request id each was answered with."""
    server = _RecordingServer(("127.0.0.1", 0), _ForwardHandler)
    server.captured = []
    server.request_ids = {}
    server.lock = threading.Lock()
    server.upstream = upstream
    with _serving(server):
        yield server


@contextmanager
def capturing() -> Iterator[_CaptureServer]:
    """A capture server on a free port; `.captured` holds (path, body) in arrival order."""
    server = _CaptureServer(("127.0.0.1", 0), _Handler)
    server.captured = []
    with _serving(server):
        yield server


@contextmanager
def _serving(server: ThreadingHTTPServer) -> Iterator[None]:
    """Serves in a thread of its own until the block ends."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
