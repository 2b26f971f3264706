"""A hostile OpenAI/SGLang-like server on 127.0.0.1 for the replay and pd_proxy tests.

Adapted from the reliability review's reproducer (``shared/reviews/repro/hostile_server.py``,
2026-11-26): the same behaviours, run in a background thread of the test process on a free port,
every endless answer bounded in time (it stops when the client goes away, or after ``ENDLESS_S``),
and a redirect target (``sink``) on another port of 127.0.0.1 that records what reaches it.

The endpoint's first path segment picks the behaviour (``http://127.0.0.1:PORT/<mode>``). Mode
``bymax`` picks it per request from the request's ``max_tokens`` (``BYMAX``), so one replay run
meets many behaviours at once and the test sees that each fails alone. Modes prefixed ``mixed_``
answer the first 3 requests normally.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time

from aiohttp import web
from builders import free_port

ENDLESS_S = 20.0  # an endless answer ends by itself after this (the client is expected to stop far sooner)

# max_tokens -> behaviour, for mode ``bymax``
BYMAX = {4: "ok", 5: "choices_int", 6: "usage_str", 7: "delta_str", 8: "malformed", 9: "usage_huge",
         10: "s500_endless", 11: "endless_nonl", 12: "s500", 13: "redirect307", 14: "ok", 15: "hugecount",
         16: "bigline", 17: "nonutf8", 18: "redirect302",
         19: "halfclose", 20: "badchunked", 21: "badchunked_late"}


def ev(d) -> bytes:
    return b"data: " + json.dumps(d).encode() + b"\n\n"


def tok_event() -> bytes:
    return ev({"choices": [{"text": "x", "token_ids": [5], "finish_reason": None}]})


class HostileServer:
    """``with HostileServer() as s``: ``s.url(mode)`` is an endpoint; ``s.sink_hits`` what reached
    the redirect target; ``s.count`` requests seen per mode."""

    def __init__(self):
        self.port, self.sink_port = free_port(), free_port()
        self.count: dict[str, int] = {}
        self.sink_hits: list[tuple[str, str, int]] = []
        # (behaviour, max_tokens, handler start and end in time.monotonic() seconds): what a test
        # prints when a run took too long, to say which answer waited and on which side
        self.handled: list[tuple[str, int, float, float]] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.port}/{mode}"

    # ---- server-info endpoints
    async def models(self, request):
        mode = request.match_info["mode"]
        if mode == "models_list":
            return web.json_response([1, 2, 3])
        if mode == "models_items_int":
            return web.json_response({"data": [1, 2]})
        if mode == "models_deep":
            return web.Response(text="[" * 100_000 + "]" * 100_000, content_type="application/json")
        if mode == "models_endless":
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            await resp.write(b'{"data": [{"id": "m", "pad": "')
            await self._endless(resp, b"x" * (1 << 20))
            return resp
        return web.json_response({"object": "list", "data": [{"id": "m", "max_model_len": 4096}]})

    async def version(self, request):
        if request.match_info["mode"] == "version_list":
            return web.json_response(["v"])
        if request.match_info["mode"] == "version_html":  # a web page where an API was asked for
            return web.Response(text="<html><body>hello</body></html>", content_type="text/html")
        return web.Response(status=404)

    async def not_found(self, request):
        return web.Response(status=404)

    async def tokenize(self, request):
        mode = request.match_info["mode"]
        if mode == "tokenize_empty":
            return web.json_response({"tokens": []})
        if mode == "tokenize_huge":
            return web.json_response({"tokens": list(range(2_500_000))})
        if mode == "tokens_str":
            return web.json_response({"tokens": ["a", None, {"x": 1}]})
        return web.json_response({"tokens": list(range(100, 1100))})

    @staticmethod
    async def _endless(resp, chunk: bytes, pause: float = 0.0) -> None:
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < ENDLESS_S:
                await resp.write(chunk)
                await asyncio.sleep(pause)
        except (ConnectionResetError, ConnectionError, asyncio.CancelledError):
            pass

    # ---- generation endpoints
    async def complete(self, request):
        seen = {"mode": request.match_info["mode"], "n": -1}
        t0 = time.monotonic()
        try:
            return await self._complete(request, seen)
        finally:
            self.handled.append((seen["mode"], seen["n"], t0, time.monotonic()))

    async def _complete(self, request, seen: dict):
        mode = request.match_info["mode"]
        try:
            body = await request.json()
        except ValueError:
            body = {}
        n = seen["n"] = int(body.get("max_tokens") or (body.get("sampling_params") or {}).get("max_new_tokens") or 5)
        k = self.count[mode] = self.count.get(mode, 0) + 1
        gen = request.path.endswith("/generate")
        if mode.startswith(("models_", "version_", "tokenize_", "tokens_")):  # server-info modes stream fine
            mode = "ok"
        elif mode == "bymax":
            mode = BYMAX.get(n, "ok")
        elif mode.startswith("mixed_"):
            mode = "ok" if k <= 3 else mode.removeprefix("mixed_")
        seen["mode"] = mode
        if mode == "s500":
            return web.Response(status=500, text="boom")
        if mode == "redirect307":
            raise web.HTTPTemporaryRedirect(f"http://127.0.0.1:{self.sink_port}/stolen{request.path}")
        if mode == "redirect302":
            raise web.HTTPFound(f"http://127.0.0.1:{self.sink_port}/stolen{request.path}")
        if mode == "halfclose":
            request.transport.close()
            return web.Response()
        status, ctype = (500, "text/plain") if mode == "s500_endless" else (200, "text/event-stream")
        resp = web.StreamResponse(status=status, headers={"Content-Type": ctype})
        await resp.prepare(request)
        if mode == "ok":
            await self._ok(resp, n, gen)
        elif mode in ("endless_nonl", "s500_endless"):
            await self._endless(resp, b"x" * (1 << 20))
        elif mode == "bigline":  # one 10 MB event, then the rest: valid, must be read
            await resp.write(ev({"choices": [{"text": "y" * (10 * 2**20), "token_ids": [5]}]}))
            await self._ok(resp, n - 1, gen)
        elif mode == "malformed":
            await resp.write(b"data: {not json at all\n\n")
            await self._ok(resp, n, gen)
        elif mode == "nonutf8":
            await resp.write(b"data: \x00\xff\xfe\n\n")
            await self._ok(resp, n, gen)
        elif mode == "hugecount":
            await resp.write(ev({"text": "x", "meta_info": {"completion_tokens": 10**12, "prompt_tokens": 10}}))
        elif mode == "usage_huge":
            await resp.write(ev({"choices": [{"text": "x"}], "usage": {"completion_tokens": 10**12,
                                                                      "prompt_tokens": 5}}))
        elif mode == "choices_int":
            await resp.write(ev({"choices": [1]}))
        elif mode == "usage_str":
            await resp.write(ev({"choices": [{"text": "x"}], "usage": "lots"}))
        elif mode == "badchunked":
            request.transport.write(b"zz\r\nnot-a-chunk\r\n")
            request.transport.close()
            return resp
        elif mode == "badchunked_late":  # a good event first, so the client has the headers before the bad chunk
            await resp.write(tok_event())
            await asyncio.sleep(0.05)
            request.transport.write(b"zz\r\nnot-a-chunk\r\n")
            request.transport.close()
            return resp
        elif mode == "delta_str":
            await resp.write(ev({"choices": [{"delta": "x", "text": "y"}]}))
            await resp.write(ev({"choices": {"0": {"text": "y"}}}))
        try:
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, ConnectionError):
            pass
        return resp

    @staticmethod
    async def _ok(resp, n: int, gen: bool) -> None:
        for i in range(n):
            if gen:
                await resp.write(ev({"text": "x", "meta_info": {"completion_tokens": i + 1, "prompt_tokens": 10}}))
            else:
                await resp.write(tok_event())

    async def sink(self, request):
        body = await request.read()
        self.sink_hits.append((request.method, request.path, len(body)))
        return web.Response(status=200, text="data: [DONE]\n\n", content_type="text/event-stream")

    # ---- lifecycle
    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_get("/{mode}/v1/models", self.models)
        app.router.add_get("/{mode}/version", self.version)
        app.router.add_get("/{mode}/get_server_info", self.not_found)
        app.router.add_post("/{mode}/tokenize", self.tokenize)
        app.router.add_get("/{mode}/metrics", self.not_found)
        for path in ("/v1/completions", "/v1/chat/completions", "/generate"):
            app.router.add_post("/{mode}" + path, self.complete)
        sapp = web.Application()
        sapp.router.add_route("*", "/{tail:.*}", self.sink)
        self.runners = [web.AppRunner(app, access_log=None, shutdown_timeout=0.5),
                        web.AppRunner(sapp, access_log=None, shutdown_timeout=0.5)]

        async def start():
            for runner, port in zip(self.runners, (self.port, self.sink_port)):
                await runner.setup()
                await web.TCPSite(runner, "127.0.0.1", port).start()
        self.loop.run_until_complete(start())
        self.ready.set()
        self.loop.run_forever()

    def __enter__(self) -> "HostileServer":
        self.thread.start()
        assert self.ready.wait(10), "the hostile server did not start"
        return self

    def __exit__(self, *exc) -> None:
        async def stop():
            for runner in self.runners:
                await runner.cleanup()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
