"""The engine called in-process, with no HTTP in front: the same prompts rendered by the same
renderer, straight into the `sglang` engine. Run as its own process (`python -m bench.inprocess
N MAX_TOKENS`), since stopping SGLang kills its parent's other children; prints JSON samples."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from bench import prompts


async def measure(count: int, max_tokens: int) -> list[dict[str, Any]]:
    from grammars import format_of
    from grammars.prompt import PromptRenderer
    from server.canonical import GenerateRequest, Message, Sampling, Text
    from server.config import Settings, default_cache_dir
    from server.engines.base import EngineRequest
    from server.engines.sglang.engine import SGLangEngine
    from server.ids import RequestIds
    from server.models.source import resolve
    from server.tokenizer import load_tokenizer

    settings = Settings(cache_dir=default_cache_dir())
    source = resolve(settings)
    tokenizer = load_tokenizer(source.path)
    renderer = PromptRenderer(tokenizer, format_of(tokenizer))
    engine = SGLangEngine(settings, source)
    await engine.start()
    ids = RequestIds()
    samples = []
    try:
        for text in prompts.questions(count):
            request = GenerateRequest(source.served_name, (Message("user", (Text(text),)),))
            started = time.perf_counter()
            prompt = renderer.render(request)
            sampling = Sampling(max_tokens=max_tokens, temperature=0)
            first, tokens = None, 0
            async for output in engine.generate(EngineRequest(ids.new(), prompt.ids, sampling)):
                first = first or time.perf_counter()
                tokens = output.completion_tokens
            ended = time.perf_counter()
            samples.append(
                {
                    "ttft_ms": ((first or ended) - started) * 1000,
                    "e2e_ms": (ended - started) * 1000,
                    "output_tokens": tokens,
                }
            )
    finally:
        await engine.close()
    return samples


if __name__ == "__main__":
    count, max_tokens = int(sys.argv[1]), int(sys.argv[2])
    print(json.dumps(asyncio.run(measure(count, max_tokens))))
