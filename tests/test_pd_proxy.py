"""pdsim.replay.pd_proxy against fake P and D servers on 127.0.0.1 (no engine): P gets the
request with one token and no stream, D gets it unchanged and its stream is relayed byte for
byte; P's error is answered as is and D is never asked; other paths are D's."""
from __future__ import annotations

import asyncio
import json

import pytest

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402

from pdsim.replay.pd_proxy import make_app, prefill_body  # noqa: E402

CHUNKS = [b'data: {"choices":[{"text":"a"}]}\n\n', b'data: {"choices":[{"text":"b"}]}\n\n', b"data: [DONE]\n\n"]


async def _serve(app) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


def _fakes(seen: dict, p_status: int = 200):
    async def p_generate(request):
        seen["p"] = await request.json()
        if p_status != 200:
            return web.json_response({"error": "bad"}, status=p_status)
        return web.json_response({"choices": [{"text": "x"}]})

    async def d_generate(request):
        seen["d"] = await request.json()
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for c in CHUNKS:
            await out.write(c)
        await out.write_eof()
        return out

    async def d_models(request):
        return web.json_response({"data": [{"id": "m"}]})

    p, d = web.Application(), web.Application()
    p.router.add_post("/v1/completions", p_generate)
    d.router.add_post("/v1/completions", d_generate)
    d.router.add_get("/v1/models", d_models)
    return p, d


async def _exchange(p_status: int = 200):
    seen: dict = {}
    p_app, d_app = _fakes(seen, p_status)
    runners = []
    try:
        rp, p_url = await _serve(p_app)
        rd, d_url = await _serve(d_app)
        rx, x_url = await _serve(make_app(p_url, d_url, timeout_s=30))
        runners = [rp, rd, rx]
        body = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 5, "min_tokens": 5, "stream": True,
                "stream_options": {"include_usage": True}, "ignore_eos": True}
        async with aiohttp.ClientSession() as s:
            async with s.post(x_url + "/v1/completions", json=body) as r:
                status, data = r.status, await r.read()
            async with s.get(x_url + "/v1/models") as r:
                models = await r.json()
            async with s.post(x_url + "/v1/completions", data=b"not json") as r:
                bad = r.status
        return seen, status, data, models, bad, body
    finally:
        for r in runners:
            await r.cleanup()


def test_p_gets_one_token_then_d_streams_through():
    seen, status, data, models, bad, body = asyncio.run(_exchange())
    assert status == 200 and data == b"".join(CHUNKS)
    assert seen["p"]["max_tokens"] == 1 and seen["p"]["min_tokens"] == 1
    assert "stream" not in seen["p"] and "stream_options" not in seen["p"]
    assert seen["p"]["prompt"] == body["prompt"]
    assert seen["d"] == body  # D gets the client's request unchanged
    assert models == {"data": [{"id": "m"}]}
    assert bad == 400


def test_p_error_is_answered_and_d_never_asked():
    seen, status, data, *_ = asyncio.run(_exchange(p_status=400))
    assert status == 400 and json.loads(data) == {"error": "bad"}
    assert "d" not in seen


def test_prefill_body_keeps_the_prompt_and_caps_every_length():
    b = prefill_body({"prompt": "x", "max_tokens": 9, "max_completion_tokens": 9, "min_tokens": 9, "stream": True})
    assert b == {"prompt": "x", "max_tokens": 1, "max_completion_tokens": 1, "min_tokens": 1}
