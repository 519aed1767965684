"""HTTP/2 answers that come before the request body is read cost their own stream, never the
connection.

Hypercorn 0.18.0 forgets a stream once its response is sent. When the app answers early (a 413
judged from Content-Length, a 401 from the head) while the client is still sending the body, the
client's next DATA frame for that stream raises `KeyError` in `H2Protocol._handle_events`, which
tears the connection down with every other request multiplexed on it. RFC 9113 section 8.1 says
what a server does instead: after a complete response it MAY reset the stream with NO_ERROR so the
client stops sending. This protocol does that, and hands the flow-control credit of frames already
in flight for a finished stream back to the connection, so its other streams are never starved.
And where the app ends without finishing its response (its task cancelled: a stalled stream cut,
see server.routes.infer), Hypercorn forgets the stream but leaves it open to the client forever;
here it is reset with CANCEL. Nor does a client that grants no flow-control window make the
server buffer without bound: the stream's buffer holds two frames, then the app's writes wait.

Hypercorn builds its HTTP/2 protocol by the name `hypercorn.protocol.H2Protocol`; `install()`
points that name here (the pin in requirements/constraints.txt keeps the internals this rests on).
"""

from __future__ import annotations

import contextlib

import h2.errors
import h2.events
import h2.exceptions
import h2.stream
import hypercorn.protocol
import priority
from hypercorn.protocol.events import Event as StreamEvent
from hypercorn.protocol.events import StreamClosed
from hypercorn.protocol.h2 import H2Protocol as HypercornH2Protocol


class H2Protocol(HypercornH2Protocol):
    async def _handle_events(self, events: list[h2.events.Event]) -> None:
        for event in events:  # one by one: a stream's HEADERS come before its DATA
            if not self._answered(event):
                await super()._handle_events([event])

    async def _send_data(self, stream_id: int) -> None:
        if self._no_window(stream_id):
            # Hypercorn would pop nothing and so unpause the app's writes: with a client that
            # grants no window, its buffer would grow without bound. Blocked until the client
            # opens the window (a WINDOW_UPDATE unblocks the stream).
            self.priority.block(stream_id)
            return
        await super()._send_data(stream_id)
        if stream_id not in self.stream_buffers and self._still_sending(stream_id):
            # The response is complete and the request is not: ask the client to stop.
            self.connection.reset_stream(stream_id, h2.errors.ErrorCodes.NO_ERROR)
            await self._flush()

    async def stream_send(self, event: StreamEvent) -> None:
        if isinstance(event, StreamClosed):
            buffer = self.stream_buffers.get(event.stream_id)
            if buffer is not None and not buffer.complete:  # the response never ended
                await buffer.close()  # the send loop then drops it
                with contextlib.suppress(h2.exceptions.ProtocolError):
                    self.connection.reset_stream(event.stream_id, h2.errors.ErrorCodes.CANCEL)
                with contextlib.suppress(priority.MissingStreamError):
                    self.priority.unblock(event.stream_id)
                await self.has_data.set()
                await self._flush()
        await super().stream_send(event)

    def _answered(self, event: h2.events.Event) -> bool:
        """True for a DATA frame of a stream whose response is over: it is dropped here, its
        credit given back to the connection."""
        if not isinstance(event, h2.events.DataReceived) or event.stream_id in self.streams:
            return False
        assert event.stream_id is not None
        self.connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        return True

    def _no_window(self, stream_id: int) -> bool:
        buffer = self.stream_buffers.get(stream_id)
        if buffer is None or buffer.complete:
            return False  # gone, or only its end to send (no data, no window needed)
        try:
            return self.connection.local_flow_control_window(stream_id) <= 0
        except h2.exceptions.StreamClosedError:
            return False  # Hypercorn's own handling drops it

    def _still_sending(self, stream_id: int) -> bool:
        stream = self.connection.streams.get(stream_id)
        return (
            stream is not None
            and stream.state_machine.state is h2.stream.StreamState.HALF_CLOSED_LOCAL
        )


def install() -> None:
    """Serve HTTP/2 with this protocol (idempotent; before the server starts)."""
    hypercorn.protocol.H2Protocol = H2Protocol  # type: ignore[misc]
