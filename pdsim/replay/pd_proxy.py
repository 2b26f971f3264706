"""A prefill/decode proxy in front of two vLLM servers that hand KV over through files
(vLLM's ``ExampleConnector``, both started with ``kv_role: kv_both`` and one
``shared_storage_path``), as vLLM's disaggregation examples do it:

1. the request goes to P with ``max_tokens`` 1, not streamed: P prefills the prompt and its
   connector saves the prompt's KV (whole pages) as files;
2. the same request goes to D: D's connector finds the files ("External Cache Hit!"), loads
   them into its paged KV, computes the prompt's tail past the last whole page, and decodes; D's
   stream is relayed to the client unchanged.

Every other path (``/v1/models``, ``/tokenize``, ``/version``) is D's. The proxy binds 127.0.0.1
only, never retries, and answers P's error (status and the start of its body) when P fails. A
side that is down or misbehaving is a JSON error naming it (``{"error": {"message": "prefill
server (P) at URL is not reachable ...", "side": "P"}}``): 503 not reachable, 504 no answer in
time, 502 a wrong answer (P's one-token answer is read to 4 MiB at most and not kept; D's stream
is relayed chunk by chunk, so neither side's answer grows the proxy's memory).

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


# P answers one token, not streamed: a few kB; far more is a misbehaving P, not read further
P_ANSWER = 4 * 2**20
ERROR_BODY = 64 * 1024  # an error answer relayed to the client (its start)
SIDES = {"P": "prefill server (P)", "D": "decode server (D)"}


class SideFailed(Exception):
    """P or D is down or misbehaving: answered to the client as a JSON error naming the side."""

    def __init__(self, side: str, base: str, status: int, what: str):
        super().__init__(f"{SIDES[side]} at {base} {what}")
        self.side, self.status = side, status


def side_failure(side: str, base: str, err: BaseException) -> SideFailed:
    """What a client-side exception of a request to P or D means, as a SideFailed: 503 when the
    side cannot be reached, 504 when it does not answer in time, 502 when it answers wrongly."""
    import asyncio

    import aiohttp

    from .guards import Malformed

    if isinstance(err, aiohttp.ClientConnectorError):
        return SideFailed(side, base, 503, f"is not reachable ({err.os_error.strerror or err})")
    if isinstance(err, asyncio.TimeoutError):
        return SideFailed(side, base, 504, "did not answer in time")
    if isinstance(err, Malformed):
        return SideFailed(side, base, 502, f"answered wrongly: {err}")
    return SideFailed(side, base, 502, f"failed mid-answer ({type(err).__name__}: {str(err)[:200]})")


def error_response(err: SideFailed):
    from aiohttp import web

    return web.json_response({"error": {"message": str(err), "type": "upstream_error", "side": err.side,
                                        "code": err.status}}, status=err.status)


def make_app(prefill: str, decode: str, timeout_s: float = 600.0):
    import asyncio
    import logging

    import aiohttp
    from aiohttp import ClientSession, ClientTimeout, web

    from .guards import Malformed, body_ends_with_connection, discard_bounded, read_bounded

    log = logging.getLogger("pdsim.pd_proxy")
    session_key = web.AppKey("session", ClientSession)
    failures = (aiohttp.ClientError, asyncio.TimeoutError)

    async def start(app):
        app[session_key] = ClientSession(timeout=ClientTimeout(total=timeout_s))

    async def stop(app):
        await app[session_key].close()

    async def relay(request, base: str, body: bytes | None):
        """D's answer streamed through chunk by chunk (memory stays one chunk whatever its
        length). D down before answering -> a JSON 503/504/502 naming D; D failing mid-stream
        -> the client's connection is closed (its status was already sent)."""
        session = request.app[session_key]
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP and k.lower() != "host"}
        out = None
        try:
            async with session.request(request.method, base + request.path_qs, data=body, headers=headers,
                                       allow_redirects=False) as r:
                out = web.StreamResponse(status=r.status, headers={k: v for k, v in r.headers.items()
                                                                   if k.lower() not in HOP})
                await out.prepare(request)
                with body_ends_with_connection(r):  # guards.py: a body left open by aiohttp's parser
                    async for chunk in r.content.iter_any():
                        await out.write(chunk)
                await out.write_eof()
                return out
        except ConnectionResetError:  # the client went away: D's answer is dropped with it
            return out
        except failures as err:
            fail = side_failure("D", base, err)
            if out is None:
                return error_response(fail)
            log.warning("%s; closing the client's stream", fail)
            if request.transport is not None:
                request.transport.close()
            return out

    async def prefill_once(request, body: dict):
        """P serves the prompt with one token; None when it answered 200, else the response to
        give the client (P's own error, bounded, or a JSON error naming P)."""
        try:
            async with request.app[session_key].post(prefill + request.path, json=prefill_body(body),
                                                     allow_redirects=False) as r:
                if r.status == 200:  # its KV is what counts: the answer is read (to its end) and dropped
                    await discard_bounded(r, P_ANSWER, "a one-token answer")
                    return None
                try:
                    answer = await read_bounded(r, ERROR_BODY, "error body")
                except Malformed:  # an endless error body: P's status, with a note for a body
                    answer = json.dumps({"error": f"{SIDES['P']} answered {r.status} with an error body longer "
                                                  f"than {ERROR_BODY // 1024} KiB"}).encode()
                return web.Response(status=r.status, body=answer, content_type=r.content_type)
        except (*failures, Malformed) as err:
            return error_response(side_failure("P", prefill, err))

    async def generate(request):
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            return web.json_response({"error": "request body is not JSON (or nested too deeply)"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "request body must be a JSON object"}, status=400)
        failed = await prefill_once(request, body)
        if failed is not None:
            return failed
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
    from ..extras import MissingExtra, require

    try:
        web = require("aiohttp.web", "pdsim.replay.pd_proxy")
    except MissingExtra as err:
        raise SystemExit(f"error: {err}") from None

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefill", required=True, help="P server base URL")
    ap.add_argument("--decode", required=True, help="D server base URL")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds a request may take at P, and D's whole stream (default 600); past it the client "
                         "gets a 504 naming the side (or, once D streams, its stream is cut)")
    args = ap.parse_args()
    if not args.timeout > 0:
        ap.error(f"argument --timeout: expected seconds > 0, got {args.timeout}")
    web.run_app(make_app(args.prefill.rstrip("/"), args.decode.rstrip("/"), args.timeout), host="127.0.0.1",
                port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
