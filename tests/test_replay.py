"""pdsim replay against an in-process fake OpenAI/SGLang streaming server on 127.0.0.1."""
from __future__ import annotations

import asyncio
import json
import threading
import warnings

import numpy as np
import pytest

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402
from builders import free_port  # noqa: E402

from pdsim.ingest import read_run  # noqa: E402
from pdsim.metrics.results import Results  # noqa: E402
from pdsim.replay import ReplayConfig, replay, write_run_outputs  # noqa: E402
from pdsim.replay.protocols import parse_chunk, request_body, sse_payloads  # noqa: E402
from pdsim.workload.table import RequestTable  # noqa: E402

ITL = 0.004  # seconds between streamed tokens of the fake server


class FakeServer:
    """Streams ``max_tokens`` tokens ITL apart; prompts with first id 13 get HTTP 503, with first id
    14 stall past any timeout, with first id 15 stop after 2 tokens; records every body."""

    def __init__(self):
        self.port = free_port()
        self.bodies: list[dict] = []
        self.loop = asyncio.new_event_loop()
        self.started = threading.Event()

    async def _stream(self, request, fmt):
        body = await request.json()
        self.bodies.append(body)
        prompt = body.get("prompt") or body.get("input_ids") or body.get("messages")
        first = prompt[0] if isinstance(prompt, list) and prompt and isinstance(prompt[0], int) else None
        if first == 13:
            return web.Response(status=503, text="overloaded")
        n = body.get("max_tokens") or body.get("sampling_params", {}).get("max_new_tokens")
        if first == 15:
            n = 2
        resp = web.StreamResponse()
        resp.content_type = "text/event-stream"
        await resp.prepare(request)
        if first == 14:
            await asyncio.sleep(5)
        for k in range(n):
            await asyncio.sleep(ITL)
            await resp.write(b"data: " + json.dumps(fmt(k, n)).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def completions(self, request):
        return await self._stream(request, lambda k, n: {"choices": [{"text": "x", "token_ids": [7],
                                                                      "finish_reason": "length" if k == n - 1 else None}],
                                                         "usage": {"prompt_tokens": 5, "completion_tokens": k + 1}})

    async def chat(self, request):
        return await self._stream(request, lambda k, n: {"choices": [{"delta": {"content": "y"},
                                                                      "finish_reason": None}]})

    async def generate(self, request):
        return await self._stream(request, lambda k, n: {"text": "z" * (k + 1),
                                                         "meta_info": {"completion_tokens": k + 1, "prompt_tokens": 5}})

    async def models(self, request):
        return web.json_response({"data": [{"id": "fake", "max_model_len": 4096}]})

    async def tokenize(self, request):
        body = await request.json()
        text = body.get("prompt") if "prompt" in body else body["messages"][0]["content"]
        extra = 3 if "messages" in body else 0  # a chat template adds tokens
        words = text.split()
        return web.json_response({"tokens": list(range(20, 20 + len(words) + extra)), "count": len(words) + extra})

    def __enter__(self):
        app = web.Application()
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/generate", self.generate)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/tokenize", self.tokenize)

        def run():
            asyncio.set_event_loop(self.loop)
            self.runner = web.AppRunner(app, access_log=None)
            self.loop.run_until_complete(self.runner.setup())
            self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
            self.started.set()
            self.loop.run_forever()
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        self.started.wait(10)
        return self

    def __exit__(self, *exc):
        fut = asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop)
        fut.result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def server():
    with FakeServer() as s:
        yield s


def _table(n=6, out=5, rate_gap=0.01, cc=None):
    return RequestTable(np.arange(n) * rate_gap, np.full(n, 8), np.full(n, out), max_concurrency=cc, source="test")


def test_completions_records_every_token(server):
    rec = replay(_table(), ReplayConfig(server.url), name="t")
    assert rec.kind == "real" and len(rec) == 6
    assert (rec.requests["drop_reason"] == None).all()  # noqa: E711
    assert list(rec.requests["output_tokens"]) == [5] * 6
    offs, times = rec.tokens.offsets, rec.tokens.times
    for i in range(6):
        t = times[offs[i]:offs[i + 1]]
        assert len(t) == 5 and np.all(np.diff(t) >= 0)
        assert t[0] > rec.requests["arrival_s"][i]
    # exact input lengths as token ids, max_tokens = output length, forced length
    body = server.bodies[-1]
    assert isinstance(body["prompt"], list) and len(body["prompt"]) == 8
    assert body["max_tokens"] == 5 and body["ignore_eos"] and body["min_tokens"] == 5
    assert rec.meta["prompt_mode"] == "token_ids" and rec.meta["served_model"] == "fake"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        s = Results(rec).summary()
    assert s["completed"] == 6 and s["mean_itl_ms"] >= ITL * 1e3 * 0.8


def test_no_garbage_collection_while_timing_and_restored_after(server, monkeypatch):
    """A collection in the client stalls every stream's reads at once (0.2-1.2 s measured
    against vLLM): the replay runs with the collector off and the live objects frozen, and
    leaves the collector as it found it."""
    import gc

    from pdsim.replay import client

    seen = []

    def probe(api, payload, state):
        seen.append((gc.isenabled(), gc.get_freeze_count() > 0))
        return real_parse(api, payload, state)

    real_parse = client.parse_chunk
    monkeypatch.setattr(client, "parse_chunk", probe)
    assert gc.isenabled()
    replay(_table(n=3), ReplayConfig(server.url))
    assert seen and all(not on and frozen for on, frozen in seen)
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_send_times_follow_the_trace_and_concurrency_bound(server):
    rec = replay(_table(n=4, rate_gap=0.1), ReplayConfig(server.url))
    a = rec.requests["arrival_s"]
    assert np.allclose(np.diff(a), 0.1, atol=0.05)
    rec = replay(_table(n=4, rate_gap=0.0, cc=1), ReplayConfig(server.url))
    a, f = rec.requests["arrival_s"], rec.requests["finish_s"]
    assert np.all(a[1:] >= f[:-1] - 1e-6)  # closed loop of one: next sent after the previous finished


def test_failures_are_recorded_not_retried(server):
    t = RequestTable(np.zeros(3), np.full(3, 8), np.full(3, 5))
    pools = {0: 13, 1: 14, 2: 15}  # 503, stall, short answer
    from pdsim.replay import client as cl

    async def run():
        async with aiohttp.ClientSession() as sess:
            r = cl.Replayer(ReplayConfig(server.url, timeout_s=0.5, model="fake"))
            return await r.run(t, lambda i: [pools[i]] + [20] * 7, sess)
    n_before = len(server.bodies)
    res = asyncio.run(run())
    assert [r.drop_reason for r in res] == ["http_503", "timeout", "short_output"]
    assert res[0].http_status == 503 and "overloaded" in res[0].error
    assert len(server.bodies) - n_before == 3  # one attempt each


def test_chat_calibrates_text_to_the_tokenizer(server):
    rec = replay(_table(n=2), ReplayConfig(server.url, api="chat"))
    assert rec.meta["prompt_mode"] == "text" and rec.meta["prompt_length_mismatches"] == 0
    content = server.bodies[-1]["messages"][0]["content"]
    assert len(content.split()) + 3 == 8  # 8 tokens with the template's 3


def test_sglang_generate_counts_cumulative_tokens(server):
    rec = replay(_table(n=2, out=4), ReplayConfig(server.url, api="generate"))
    assert list(rec.requests["output_tokens"]) == [4, 4]
    assert "input_ids" in server.bodies[-1]


def test_outputs_and_bench_json_round_trip(server, tmp_path):
    rec = replay(_table(), ReplayConfig(server.url), name="rt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = Results(rec)
        names = write_run_outputs(res, tmp_path, "csv", report=True, bench_json=True)
        assert set(names) == {"summary.json", "requests.csv", "timeline.csv", "report.html", "plotly.min.js", "bench.json"}
        back = read_run(tmp_path)
        s0, s1 = res.summary(), Results(back.record).summary()
    assert back.format == "pdsim-replay"
    for k in ("mean_ttft_ms", "p90_itl_ms", "mean_e2e_latency_ms", "completed"):
        assert s1[k] == pytest.approx(s0[k], rel=1e-6, abs=1e-3)


def test_sse_parsing_handles_split_events():
    buf = bytearray(b'data: {"a": 1}\n\ndata: {"b"')
    assert sse_payloads(buf) == [b'{"a": 1}']
    buf.extend(b': 2}\r\n\r\ndata: [DONE]\n\n')
    assert sse_payloads(buf) == [b'{"b": 2}', b"[DONE]"]
    st: dict = {}
    c = parse_chunk("completions", b'{"choices":[{"text":"ab","token_ids":[1,2]}],"usage":{"completion_tokens":2}}', st)
    assert c.tokens == 2
    assert parse_chunk("completions", b"[DONE]", st) is None
    assert parse_chunk("chat", b'{"error": {"message": "boom"}}', {}).error == "boom"
    b = request_body("generate", "m", [1, 2], 3)
    assert b["sampling_params"]["max_new_tokens"] == 3 and b["input_ids"] == [1, 2]


def test_cli_rejects_bad_flags(tmp_path):
    from pdsim.cli import main
    assert main(["replay", "nothing.yaml", "--endpoint", "http://127.0.0.1:1", "--out", str(tmp_path)]) == 2
    assert main(["replay", "sharegpt-poisson", "--endpoint", "http://127.0.0.1:1", "--out", str(tmp_path),
                 "--time-scale", "0"]) == 2
