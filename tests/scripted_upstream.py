"""A scripted Chat Completions upstream on loopback, for the gateway's failures a real server
cannot be made to produce on demand: the model asked for names the behaviour. It records each
request's headers and body, and whether a streamed answer's client went away."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.server_process import free_port

ERROR_400 = {"error": {"message": "messages.0: bad thing", "type": "invalid_request_error",
                       "param": "messages.0", "code": None}}  # fmt: skip


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    data = {
        "id": "upstream-id",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + json.dumps(data).encode() + b"\n\n"


USAGE = {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}
ANSWER = (
    chunk({"role": "assistant", "content": "Hi"}),
    chunk({"content": "!"}),
    chunk({}, "stop"),
    b'data: {"id": "upstream-id", "choices": [], "usage": ' + json.dumps(USAGE).encode() + b"}\n\n",
    b"data: [DONE]\n\n",
)


class ScriptedUpstream:
    def __init__(self) -> None:
        self.port = free_port()
        self.requests: list[dict[str, Any]] = []
        self.gone = threading.Event()  # a held stream's client closed it
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # a streamed body ends with the connection

            def log_message(self, *_: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                upstream.requests.append({"headers": dict(self.headers), "body": body})
                upstream.answer(self, body.get("model", ""))

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> ScriptedUpstream:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, handler: BaseHTTPRequestHandler, model: str) -> None:
        if model == "fail-500":
            self._json(handler, 500, {"error": {"message": "upstream exploded"}})
        elif model == "fail-429":
            self._json(handler, 429, {"error": {"message": "too many"}}, {"Retry-After": "7"})
        elif model == "fail-400":
            self._json(handler, 400, ERROR_400)
        elif model == "slow":
            time.sleep(3)  # past the front's --gateway-timeout
            self._json(handler, 500, {"error": {"message": "late"}})
        else:
            self._stream(handler, model)

    def _json(
        self,
        handler: BaseHTTPRequestHandler,
        status: int,
        body: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> None:
        raw = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(raw)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(raw)

    def _stream(self, handler: BaseHTTPRequestHandler, model: str) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.end_headers()
        if model == "cut":  # one piece, then the connection ends without a finish
            handler.wfile.write(ANSWER[0])
            return
        if model == "hold":  # one piece, then keep-alive comments until the client goes
            handler.wfile.write(ANSWER[0])
            try:
                for _ in range(600):
                    time.sleep(0.05)
                    handler.wfile.write(b": still here\n\n")
                    handler.wfile.flush()
            except OSError:
                self.gone.set()
            return
        for piece in ANSWER:
            handler.wfile.write(piece)
