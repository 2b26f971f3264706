"""pdsim.replay.pd_proxy when P or D is down or misbehaving (review: an endless P body grew the
proxy to 1.4 GB; P down, D down, `/v1/models` with D down and a 200k-deep JSON body gave aiohttp's
bare `500 Server got itself in trouble` with tracebacks). Now: a JSON error naming the side
(503 not reachable, 504 no answer in time, 502 a wrong answer), bounded reads, no traceback."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402

from builders import free_port  # noqa: E402

from pdsim.replay.pd_proxy import make_app  # noqa: E402

BODY = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 3, "stream": True}
ENDLESS_S = 15.0


async def _serve(app, port: int = 0) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"


async def _endless(resp, chunk: bytes) -> None:
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < ENDLESS_S:
            await resp.write(chunk)
    except (ConnectionResetError, ConnectionError):
        pass


def _p_app(mode: str):
    async def gen(request):
        await request.read()
        if mode == "ok":
            return web.json_response({"choices": [{"text": "x"}]})
        if mode == "hang":
            await asyncio.sleep(30)
        if mode == "halfclose":
            request.transport.close()
            return web.Response()
        resp = web.StreamResponse(status=500 if mode == "endless_500" else 200)
        await resp.prepare(request)
        await _endless(resp, b"x" * (1 << 20))
        return resp
    app = web.Application()
    app.router.add_post("/v1/completions", gen)
    return app


def _d_app(mode: str = "ok"):
    async def gen(request):
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices":[{"text":"a"}]}\n\n')
        if mode == "dies":
            request.transport.close()
            return resp
        if mode == "bad_chunk":  # after its first event, a chunk size that is no number, then gone
            await asyncio.sleep(0.05)
            request.transport.write(b"zz\r\nnot-a-chunk\r\n")
            request.transport.close()
            return resp
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def models(request):
        return web.json_response({"data": [{"id": "m"}]})
    app = web.Application()
    app.router.add_post("/v1/completions", gen)
    app.router.add_get("/v1/models", models)
    return app


async def _ask(p_mode: str | None, d_mode: str | None, *, path="/v1/completions", data=None, timeout_s=30.0):
    """Start P and D (None: nothing listens there) and the proxy; one request through it."""
    runners = []
    try:
        urls = []
        for app in (_p_app(p_mode) if p_mode else None, _d_app(d_mode) if d_mode else None):
            if app is None:
                urls.append(f"http://127.0.0.1:{free_port()}")
            else:
                r, u = await _serve(app)
                runners.append(r)
                urls.append(u)
        rx, x_url = await _serve(make_app(urls[0], urls[1], timeout_s=timeout_s))
        runners.append(rx)
        async with aiohttp.ClientSession() as s:
            method = "GET" if path == "/v1/models" else "POST"
            kw = {"data": data} if data is not None else ({"json": BODY} if method == "POST" else {})
            async with s.request(method, x_url + path, **kw) as r:
                try:
                    raw = await r.read()
                except aiohttp.ClientPayloadError:
                    raw = b"<cut>"
                return r.status, raw, urls
    finally:
        for r in reversed(runners):
            await r.cleanup()


@pytest.fixture(autouse=True)
def no_tracebacks(caplog):
    caplog.set_level(logging.WARNING)
    yield
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage() for r in bad]


def _error(raw: bytes) -> dict:
    return json.loads(raw)["error"]


@pytest.mark.parametrize("p_mode, d_mode, path, status, side, words", [
    (None, "ok", "/v1/completions", 503, "P", "prefill server (P) at {p} is not reachable"),
    ("ok", None, "/v1/completions", 503, "D", "decode server (D) at {d} is not reachable"),
    ("ok", None, "/v1/models", 503, "D", "decode server (D) at {d} is not reachable"),
    ("endless_200", "ok", "/v1/completions", 502, "P", "a one-token answer longer than 4 MiB"),
    ("halfclose", "ok", "/v1/completions", 502, "P", "prefill server (P) at {p} failed mid-answer"),
])
def test_a_side_down_or_misbehaving_is_named(p_mode, d_mode, path, status, side, words):
    t0 = time.perf_counter()
    got, raw, (p, d) = asyncio.run(_ask(p_mode, d_mode, path=path))
    assert got == status, raw[:300]
    err = _error(raw)
    assert err["side"] == side and words.format(p=p, d=d) in err["message"], err
    assert time.perf_counter() - t0 < 10


def test_p_not_answering_in_time_is_a_504_naming_p():
    got, raw, (p, _) = asyncio.run(_ask("hang", "ok", timeout_s=1.0))
    assert got == 504 and _error(raw)["message"] == f"prefill server (P) at {p} did not answer in time"


def test_p_endless_error_body_keeps_its_status_not_its_body():
    got, raw, _ = asyncio.run(_ask("endless_500", "ok"))
    assert got == 500 and b"error body longer than 64 KiB" in raw and len(raw) < 1000


def test_deeply_nested_request_is_a_400():
    got, raw, _ = asyncio.run(_ask("ok", "ok", data=b"[" * 200_000 + b"]" * 200_000))
    assert got == 400 and b"not JSON" in raw


@pytest.mark.parametrize("d_mode", ["dies", "bad_chunk"])
def test_d_dying_mid_stream_cuts_the_clients_stream_without_a_traceback(d_mode):
    """``bad_chunk``: aiohttp's C parser left D's body open after the bad chunk, and the proxy held
    the client's stream until its timeout (guards.body_ends_with_connection)."""
    t0 = time.perf_counter()
    got, raw, _ = asyncio.run(_ask("ok", d_mode))
    assert got == 200 and raw in (b"<cut>", b'data: {"choices":[{"text":"a"}]}\n\n')
    assert time.perf_counter() - t0 < 10


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 * 2**30, 1 * 2**30))


def test_endless_p_body_does_not_grow_the_proxy():
    """The proxy as run from the command line, under a 1 GiB address-space limit: P answers 200
    with an endless body; the proxy answers 502 at once and stays small and alive."""
    # P and D URLs are fixed before the proxy starts: it gets ports the fakes then bind
    port, p_port, d_port = free_port(), free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pdsim.replay.pd_proxy", "--prefill", f"http://127.0.0.1:{p_port}",
                             "--decode", f"http://127.0.0.1:{d_port}", "--port", str(port)],
                            stderr=subprocess.PIPE, text=True, preexec_fn=_limit_memory,
                            env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])))
    try:
        async def run():
            rp, _ = await _serve(_p_app("endless_200"), p_port)
            rd, _ = await _serve(_d_app(), d_port)
            try:
                return await scenario_client(port, proc)
            finally:
                await rp.cleanup()
                await rd.cleanup()
        status, answer = asyncio.run(run())
        assert status == 502 and answer["error"]["side"] == "P"
        hwm_kb = int(next(ln for ln in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                          if ln.startswith("VmHWM")).split()[1])
        assert hwm_kb < 300 * 1024, f"proxy peak RSS {hwm_kb / 1024:.0f} MB"
        assert proc.poll() is None
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "Traceback" not in err


async def scenario_client(port: int, proc) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s:
        for _ in range(200):  # wait for the proxy to listen
            try:
                async with s.get(f"http://127.0.0.1:{port}/v1/models") as r:
                    await r.read()
                    break
            except aiohttp.ClientConnectionError:
                assert proc.poll() is None, "the proxy did not start"
                await asyncio.sleep(0.05)
        async with s.post(f"http://127.0.0.1:{port}/v1/completions", json=BODY) as r:
            return r.status, await r.json()
