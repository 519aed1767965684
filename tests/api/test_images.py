"""Images through both protocols, up to the engine boundary: the real app and Hypercorn, the
real tokenizer, decoders, egress guard (against a real HTTPS server on loopback) and Pillow, in
front of a scripted engine declared to take images (the embedded model has no vision, and is
refused images: see the contract tables). What reaches the engine is checked: normalized PNGs,
in order, and the family's image placeholder in the prompt where each image stood."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from server.config import Settings, default_cache_dir
from server.images.decode import TOKENS_PER_IMAGE
from server.images.loader import ImageLoader
from server.models.embedded import ensure_converted
from server.tokenizer import load_tokenizer
from tests.api.conventions import wait_for
from tests.api.scripted import ScriptedServer, end, scripted_server, text
from tests.image_server import PHOTO, ImageServer, png
from tests.server_process import free_port

MODEL = "b3os/smollm2-135m-instruct"
PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"
SMALL = png(64, 48, "red")
B64 = base64.b64encode(SMALL).decode()


@pytest.fixture(scope="module")
def images() -> Iterator[ImageServer]:
    with ImageServer() as server:
        yield server


def start(images: ImageServer, tmp: Path, limits: str | None = None) -> Iterator[ScriptedServer]:
    path = None
    if limits is not None:
        path = tmp / "limits.toml"
        path.write_text(limits)
    settings = Settings(
        port=free_port(), node_name="test-node", cache_dir=Path(default_cache_dir()), limits=path
    )
    yield from scripted_server(settings, vision=True, images=ImageLoader(images.guard()))


@pytest.fixture(scope="module")
def vision(
    images: ImageServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ScriptedServer]:
    yield from start(images, tmp_path_factory.mktemp("vision"))


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer(str(ensure_converted(default_cache_dir())))


@pytest.fixture
def client(vision: ScriptedServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=vision.origin, timeout=60) as http:
        yield http


def reached(server: ScriptedServer) -> list[Image.Image]:
    """The images of the last request that reached the engine."""
    request = server.engine.requests[-1]
    return [Image.open(io.BytesIO(data)) for data in request.images]


def test_models_list_image_input(client: httpx.Client) -> None:
    card = client.get("/v1/infer/models").json()["data"][0]
    assert "image_input" in card["capabilities"]


def test_messages_base64_and_url_images_reach_the_engine_in_order(
    vision: ScriptedServer, client: httpx.Client, images: ImageServer, tokenizer: Any
) -> None:
    vision.play(text("A cat.", 3), end(2100, 3))
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}},
        {"type": "text", "text": "And this one?"},
        {"type": "image", "source": {"type": "url", "url": images.url("/photo.png")}},
    ]
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": content}]}
    response = client.post("/v1/infer/v1/messages", json=body)
    assert response.status_code == 200, response.text
    first, second = reached(vision)
    assert (first.format, first.size) == ("PNG", (64, 48))
    assert second.format == "PNG"
    assert second.size[0] * second.size[1] <= 1024 * 1024  # 1600x1200 scaled down
    assert abs(second.size[0] / second.size[1] - 4 / 3) < 0.01
    prompt = tokenizer.decode(vision.engine.requests[-1].prompt_ids)
    assert prompt.count(PLACEHOLDER) == 2
    assert prompt.index(PLACEHOLDER) < prompt.index("And this one?") < prompt.rindex(PLACEHOLDER)
    assert "images" in response.headers["server-timing"]


def test_chat_data_url_and_https_images_reach_the_engine(
    vision: ScriptedServer, client: httpx.Client, images: ImageServer
) -> None:
    vision.play(text("Two.", 1), end(2100, 1))
    parts = [
        {"type": "text", "text": "Compare."},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64}"}},
        {"type": "image_url", "image_url": {"url": images.url("/photo.png"), "detail": "low"}},
    ]
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": parts}]}
    response = client.post("/v1/infer/chat/completions", json=body)
    assert response.status_code == 200, response.text
    small, photo = reached(vision)
    assert small.size == (64, 48)
    assert photo.size[0] * photo.size[1] <= 1024 * 1024


def test_responses_input_images_reach_the_engine_in_order(
    vision: ScriptedServer, client: httpx.Client, images: ImageServer, tokenizer: Any
) -> None:
    """input_image parts of a message and of a function call's output, as the Responses API
    sends them: each reaches the engine where it stood."""
    vision.play(text("Two.", 1), end(2100, 1))
    body = {
        "model": MODEL,
        "max_output_tokens": 8,
        "tools": [{"type": "function", "name": "snap", "parameters": {"type": "object"}}],
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Compare."},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{B64}"},
                ],
            },
            {"type": "function_call", "call_id": "call_1", "name": "snap", "arguments": "{}"},
            {
                "type": "function_call_output",
                "call_id": "call_1",
                "output": [
                    {"type": "input_text", "text": "the photo"},
                    {"type": "input_image", "image_url": images.url("/photo.png")},
                ],
            },
        ],
    }
    response = client.post("/v1/infer/responses", json=body)
    assert response.status_code == 200, response.text
    small, photo = reached(vision)
    assert small.size == (64, 48)
    assert photo.size[0] * photo.size[1] <= 1024 * 1024
    prompt = tokenizer.decode(vision.engine.requests[-1].prompt_ids)
    assert prompt.count(PLACEHOLDER) == 2
    assert prompt.index(PLACEHOLDER) < prompt.index("the photo") < prompt.rindex(PLACEHOLDER)


def test_an_image_in_a_tool_result_reaches_the_engine(
    vision: ScriptedServer, client: httpx.Client
) -> None:
    vision.play(text("Seen.", 1), end(1100, 1))
    tool = {"name": "snap", "description": "Takes a photo", "input_schema": {"type": "object"}}
    result = [
        {"type": "text", "text": "the photo"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}},
    ]
    body = {
        "model": MODEL,
        "max_tokens": 8,
        "tools": [tool],
        "messages": [
            {"role": "user", "content": "Take a photo."},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "snap", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": result}],
            },
        ],
    }
    response = client.post("/v1/infer/v1/messages", json=body)
    assert response.status_code == 200, response.text
    assert [image.size for image in reached(vision)] == [(64, 48)]


def test_count_tokens_counts_about_1024_per_image(client: httpx.Client) -> None:
    def count(content: Any) -> int:
        body = {"model": MODEL, "messages": [{"role": "user", "content": content}]}
        response = client.post("/v1/infer/v1/messages/count_tokens", json=body)
        assert response.status_code == 200, response.text
        return int(response.json()["input_tokens"])

    image = {"type": "image", "source": {"type": "url", "url": "https://never.fetched/a.png"}}
    plain = count([{"type": "text", "text": "Describe."}])
    with_image = count([image, {"type": "text", "text": "Describe."}])
    assert TOKENS_PER_IMAGE < with_image - plain <= TOKENS_PER_IMAGE + 32  # + the placeholder


@pytest.mark.parametrize("path", ["/to-private", "/to-metadata"])
def test_a_refused_destination_is_403_egress_denied_in_each_shape(
    vision: ScriptedServer, client: httpx.Client, images: ImageServer, path: str
) -> None:
    served = len(vision.engine.requests)
    image = {"type": "image", "source": {"type": "url", "url": images.url(path)}}
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": [image]}]}
    response = client.post("/v1/infer/v1/messages", json=body)
    assert response.status_code == 403
    assert response.json()["type"] == "error"
    assert response.json()["b3os"]["code"] == "egress_denied"
    part = {"type": "image_url", "image_url": {"url": images.url(path)}}
    chat = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": [part]}]}
    response = client.post("/v1/infer/chat/completions", json=chat)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "egress_denied"
    assert len(vision.engine.requests) == served  # nothing reached the engine


def test_fake_and_oversized_images_are_refused_naming_them(
    client: httpx.Client, images: ImageServer
) -> None:
    fake = base64.b64encode(b"<svg>not really a png</svg>").decode()
    content = [
        {"type": "text", "text": "Look."},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": fake}},
    ]
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": content}]}
    response = client.post("/v1/infer/v1/messages", json=body)
    assert response.status_code == 400
    error = response.json()
    assert error["b3os"]["param"] == "messages.0.content.1"
    assert "not a PNG, JPEG, WebP or GIF image" in error["error"]["message"]
    part = {"type": "image_url", "image_url": {"url": images.url("/big")}}
    chat = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": [part]}]}
    response = client.post("/v1/infer/chat/completions", json=chat)
    assert response.status_code == 400
    assert "larger than 10485760 bytes" in response.json()["error"]["message"]


@pytest.fixture(scope="module")
def metered(
    images: ImageServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ScriptedServer]:
    limits = f"[default]\nimage_bytes_per_minute = {len(PHOTO) + 1000}\n"
    yield from start(images, tmp_path_factory.mktemp("metered"), limits)


def test_remote_image_bytes_count_against_the_organization(
    metered: ScriptedServer, images: ImageServer
) -> None:
    part = {"type": "image_url", "image_url": {"url": images.url("/photo.png")}}
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": [part]}]}
    metered.play(text("One.", 1), end(1100, 1))
    with httpx.Client(base_url=metered.origin, timeout=60) as client:
        assert client.post("/v1/infer/chat/completions", json=body).status_code == 200
        refused = client.post("/v1/infer/chat/completions", json=body)
        if refused.status_code == 200:  # the minute turned between the two: once more
            metered.play(text("One.", 1), end(1100, 1))
            refused = client.post("/v1/infer/chat/completions", json=body)
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "rate_limited"
    assert "bytes of remote images per minute" in error["message"]
    assert int(refused.headers["ratelimit-limit"]) == len(PHOTO) + 1000
    assert int(refused.headers["retry-after"]) <= 60


@pytest.fixture(scope="module")
def one_at_a_time(
    images: ImageServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ScriptedServer]:
    limits = "[default]\nrequests_in_flight = 1\n"
    yield from start(images, tmp_path_factory.mktemp("single"), limits)


def test_a_client_gone_during_the_image_fetch_is_let_go(
    one_at_a_time: ScriptedServer, images: ImageServer
) -> None:
    """The request held its organization's one place in flight while its image was fetched
    (1.5 s): the client leaving then gives the place back, and the next request is served."""
    part = {"type": "image_url", "image_url": {"url": images.url("/slow")}}
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": [part]}]}
    with httpx.Client(base_url=one_at_a_time.origin, timeout=0.5) as client:
        with pytest.raises(httpx.ReadTimeout):
            client.post("/v1/infer/chat/completions", json=body)  # gone before the image came
    one_at_a_time.play(text("One.", 1), end(20, 1))
    plain = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
    with httpx.Client(base_url=one_at_a_time.origin, timeout=60) as client:
        served = wait_for(
            lambda: (
                (r := client.post("/v1/infer/chat/completions", json=plain)).status_code != 429
                and r
            )
        )
        assert served.status_code == 200, served.text
        metrics = client.get("/metrics").text
    assert "b3os_infer_requests_in_flight 0.0" in metrics
