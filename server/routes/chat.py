"""The OpenAI Chat Completions route: `POST /v1/infer/chat/completions`."""

from __future__ import annotations

from functools import partial

from quart import Blueprint, Response

from server.auth.guard import requires
from server.protocols.openai import encode
from server.protocols.openai.decode import decode_chat
from server.routes.infer import answer, read_json, served
from server.state import server_state

blueprint = Blueprint("chat", __name__)


@blueprint.post("/v1/infer/chat/completions")
@requires("infer:run")
async def create_chat_completion() -> Response:
    generation = server_state().ready()  # 503 until then, before the body is judged
    request, options = decode_chat(await read_json())
    service = served(generation, request.model, options.route)
    stream = partial(encode.ChunkStream, include_usage=options.include_usage)
    return await answer(request, service, "chat.completions", encode.completion_body, stream)
