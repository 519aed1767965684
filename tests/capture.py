"""A capturing stand-in for the Messages API on a loopback port: it keeps each request body a
client sends and answers with the smallest valid message (streamed when asked), so that a client
such as Claude Code runs to its end. What was captured is replayed against the real server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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
    events = [
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


@contextmanager
def capturing() -> Iterator[_CaptureServer]:
    """A capture server on a free port; `.captured` holds (path, body) in arrival order."""
    server = _CaptureServer(("127.0.0.1", 0), _Handler)
    server.captured = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
