"""A prefill/decode proxy in front of two vLLM servers that hand KV over through files
(vLLM's ``ExampleConnector``, both started with ``kv_role: kv_both`` and one
``shared_storage_path``), as vLLM's disaggregation examples do it:

1. the request goes to P with ``max_tokens`` 1, not streamed: P prefills the prompt and its
   connector saves the prompt's KV (whole pages) as files;
2. the same request goes to D: D's connector finds the files ("External Cache Hit!"), loads
   them into its paged KV, computes the prompt's tail past the last whole page, and decodes; D's
   stream is relayed to the client unchanged.

Every other path (``/v1/models``, ``/tokenize``, ``/version``) is D's. The proxy binds 127.0.0.1
only, never retries, and answers P's error (status and body) when P fails.

    python -m pdsim.replay.pd_proxy --prefill http://127.0.0.1:8100 --decode http://127.0.0.1:8200 --port 8300
"""
from __future__ import annotations

import argparse
import json

GENERATE = ("/v1/completions", "/v1/chat/completions")
HOP = {"content-length", "transfer-encoding", "connection", "content-encoding", "keep-alive"}


def prefill_body(body: dict) -> dict:
    """The request P serves: one token, no stream (its KV is what the proxy wants)."""
    out = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    out["max_tokens"] = 1
    for key in ("max_completion_tokens", "min_tokens"):  # min_tokens > max_tokens is refused
        if key in out:
            out[key] = 1
    return out


def make_app(prefill: str, decode: str, timeout_s: float = 600.0):
    from aiohttp import ClientSession, ClientTimeout, web

    session_key = web.AppKey("session", ClientSession)

    async def start(app):
        app[session_key] = ClientSession(timeout=ClientTimeout(total=timeout_s))

    async def stop(app):
        await app[session_key].close()

    async def relay(request, base: str, body: bytes | None):
        session = request.app[session_key]
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP and k.lower() != "host"}
        async with session.request(request.method, base + request.path_qs, data=body, headers=headers) as r:
            out = web.StreamResponse(status=r.status, headers={k: v for k, v in r.headers.items()
                                                               if k.lower() not in HOP})
            await out.prepare(request)
            async for chunk in r.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    async def generate(request):
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return web.json_response({"error": "request body is not JSON"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "request body must be a JSON object"}, status=400)
        async with request.app[session_key].post(prefill + request.path, json=prefill_body(body)) as r:
            answer = await r.read()
            if r.status != 200:
                return web.Response(status=r.status, body=answer, content_type=r.content_type)
        return await relay(request, decode, raw)

    async def other(request):
        return await relay(request, decode, await request.read() if request.can_read_body else None)

    app = web.Application(client_max_size=64 * 2**20)
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    for path in GENERATE:
        app.router.add_post(path, generate)
    app.router.add_route("*", "/{tail:.*}", other)
    return app


def main() -> None:
    from aiohttp import web

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefill", required=True, help="P server base URL")
    ap.add_argument("--decode", required=True, help="D server base URL")
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    web.run_app(make_app(args.prefill.rstrip("/"), args.decode.rstrip("/")), host="127.0.0.1", port=args.port,
                print=None, access_log=None)


if __name__ == "__main__":
    main()
