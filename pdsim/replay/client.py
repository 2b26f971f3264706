"""The replay client: send a request table to a real server and time every streamed token.

asyncio + aiohttp: the HTTP client SGLang's ``bench_serving`` and vLLM's ``benchmark_serving``
use, so client-side overheads are those of the reference benchmarks; its streaming reader hands
over bytes as they arrive, and each token's time is taken when its event is read.

Sending: request i is sent at ``arrival_s[i]`` (seconds from the start, already scaled) or,
with ``max_concurrency``, when a slot frees up after that (bench_serving ``--max-concurrency``;
the closed loop of a table whose arrivals are all 0). Every run is bounded: without
``max_concurrency`` at most ``max_inflight`` requests are in flight, and a request that had to
wait for that bound is counted (``meta['waited_for_inflight_bound']``: the offered load was
not what the table says). One attempt per request, never a silent retry: a failed request
keeps its HTTP status, error text and drop reason (``http_<status>``, ``timeout``,
``connection_error``, ``stream_error``, ``malformed_stream``, ``short_output``, ``cancelled``,
``not_sent``, ``client_error``).

A broken or hostile server fails the request it answers, never the run (guards.py): error
bodies, events and token counts are read within bounds, an answer that is not the API's shape
is ``malformed_stream`` with the reason, and redirects are not followed unless
``follow_redirects`` (a 3xx is then ``http_3xx`` naming its Location; a followed one is
recorded per request in ``redirect``).
Ctrl-C (SIGINT) stops sending, cancels what is in flight and returns everything so far.
"""
from __future__ import annotations

import asyncio
import gc
import signal
import time
from dataclasses import dataclass, field

import numpy as np

from ..workload.table import RequestTable
from .guards import COUNT_SLACK, FREE_PER_STREAM, HeldBytes, Malformed, body_ends_with_connection, error_text
from .priority import check_fifo
from .protocols import APIS, parse_chunk, request_body, sse_payloads


@dataclass
class ReplayConfig:
    endpoint: str  # base URL, e.g. http://127.0.0.1:8000
    api: str = "completions"  # completions | chat | generate
    model: str | None = None  # served model name (None: the server's first model)
    max_concurrency: int | None = None
    max_inflight: int = 1024
    timeout_s: float = 600.0  # per request, from send to the end of its stream
    ignore_eos: bool = True
    prompt: str = "auto"  # auto | token_ids | text
    seed: int = 0
    vocab_size: int | None = None  # token-id pool without /tokenize
    progress: bool = False
    extra_body: dict = field(default_factory=dict)
    follow_redirects: bool = False  # a 3xx fails the request (naming its Location) unless set
    skip_too_long: bool = False  # leave out requests past the server's max_model_len (else refuse the run)
    fifo: int | None = None  # SCHED_FIFO priority of the send/receive loop (priority.py); None: as started

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise ValueError(f"api must be one of {', '.join(APIS)}, got {self.api!r}")
        if self.prompt not in ("auto", "token_ids", "text"):
            raise ValueError(f"prompt must be auto, token_ids or text, got {self.prompt!r}")
        if self.prompt == "token_ids" and self.api == "chat":
            raise ValueError("the chat API takes text, not token ids (use prompt: text or api: completions)")
        check_fifo(self.fifo)


@dataclass
class RequestResult:
    """What the client saw of one request; times are seconds from the run's start."""

    index: int
    send_s: float = float("nan")
    token_s: list[float] = field(default_factory=list)
    stream_end_s: float = float("nan")
    http_status: int = 0
    error: str = ""
    drop_reason: str | None = None
    prompt_tokens: int = -1  # as the server counted them (usage), -1 unknown
    completion_tokens: int = -1  # server's final count, -1 unknown
    finish_reason: str = ""
    redirect: str = ""  # where the server redirected this request (followed or not)


class Replayer:
    """One replay run: ``await Replayer(cfg).run(table, prompts)``."""

    def __init__(self, cfg: ReplayConfig):
        self.cfg = cfg
        self.t0 = 0.0
        self.waited = 0
        self.stopped = False
        self.held = HeldBytes()  # partial events of all streams together (guards.py)

    def now(self) -> float:
        return time.perf_counter() - self.t0

    async def run(self, table: RequestTable, make_prompt, session) -> list[RequestResult]:
        """Send every request of ``table``; ``make_prompt(i)`` gives request i's prompt."""
        cfg = self.cfg
        n = len(table)
        results = [RequestResult(i) for i in range(n)]
        cc = cfg.max_concurrency or table.max_concurrency
        bound = cc or cfg.max_inflight
        sem = asyncio.Semaphore(bound)
        tasks: set[asyncio.Task] = set()
        bar = None
        if cfg.progress:
            from tqdm import tqdm
            bar = tqdm(total=n, unit="req", dynamic_ncols=True, leave=False)
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()

        def on_sigint():
            self.stopped = True
            main.cancel()

        try:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
            installed = True
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / platform
            installed = False
        url = cfg.endpoint.rstrip("/") + APIS[cfg.api]
        arrivals = table.arrival_s.tolist()
        outs = table.output_len.tolist()
        # no garbage collection while timing: a full collection of this process stalls every
        # stream's reads at once (measured: 0.2-1.2 s pauses every few seconds of streaming, read
        # as inter-token gaps and late sends); what is alive now is frozen out of the collector,
        # and the cycles a bounded run leaves are collected when it ends
        gc_was_on = gc.isenabled()
        gc.freeze()
        gc.disable()
        self.t0 = time.perf_counter()
        try:
            for i in range(n):
                delay = arrivals[i] - self.now()
                if delay > 0:
                    await asyncio.sleep(delay)
                if sem.locked() and not cc:
                    self.waited += 1
                await sem.acquire()
                body = request_body(cfg.api, cfg.model or "", make_prompt(i), int(outs[i]),
                                    ignore_eos=cfg.ignore_eos, extra=cfg.extra_body)
                task = asyncio.create_task(self._one(session, url, body, int(outs[i]), results[i]))
                tasks.add(task)

                def done(t, _bar=bar):
                    tasks.discard(t)
                    sem.release()
                    if _bar is not None:
                        _bar.update(1)
                task.add_done_callback(done)
            if tasks:
                await asyncio.gather(*list(tasks))
        except asyncio.CancelledError:
            if not self.stopped:
                raise
            for t in list(tasks):
                t.cancel()
            if tasks:
                await asyncio.gather(*list(tasks), return_exceptions=True)
        finally:
            if gc_was_on:
                gc.enable()
            gc.unfreeze()
            if installed:
                loop.remove_signal_handler(signal.SIGINT)
            if bar is not None:
                bar.close()
        for r in results:
            if np.isnan(r.send_s):
                r.drop_reason = "not_sent"
        return results

    async def _one(self, session, url: str, body: dict, want: int, r: RequestResult) -> None:
        import aiohttp

        api = self.cfg.api
        r.send_s = self.now()
        most = want + COUNT_SLACK  # no count past this is plausible for this request
        state: dict = {"most": most}
        got = held = 0
        try:
            timeout = aiohttp.ClientTimeout(total=self.cfg.timeout_s)
            async with session.post(url, json=body, timeout=timeout,
                                    allow_redirects=self.cfg.follow_redirects) as resp:
                with body_ends_with_connection(resp):  # guards.py: a body left open by aiohttp's parser
                    r.http_status = resp.status
                    if resp.history:  # followed (--follow-redirects): say where the request went
                        r.redirect = " -> ".join(str(h.headers.get("Location", "?")) for h in resp.history)[:300]
                    if 300 <= resp.status < 400 and "Location" in resp.headers:
                        r.redirect = resp.headers["Location"][:300]
                        r.drop_reason = f"http_{resp.status}"
                        r.error = (f"redirected to {r.redirect} (not followed; --follow-redirects follows "
                                   "redirects)")[:300]
                        return
                    if resp.status != 200:
                        r.error = await error_text(resp)
                        r.drop_reason = f"http_{resp.status}"
                        return
                    buf = bytearray()
                    finished = False
                    async for data in resp.content.iter_any():
                        t = self.now()
                        start = max(0, len(buf) - 3)  # an event end may straddle the previous read
                        buf.extend(data)
                        for payload in sse_payloads(buf, start=start):
                            ch = parse_chunk(api, payload, state)
                            if ch is None:
                                finished = True
                                break
                            if ch.error:
                                r.error, r.drop_reason = ch.error, "stream_error"
                            if ch.prompt_tokens is not None:
                                r.prompt_tokens = ch.prompt_tokens
                            if ch.completion_tokens is not None:
                                r.completion_tokens = ch.completion_tokens
                            if ch.finish_reason:
                                r.finish_reason = str(ch.finish_reason)
                            if ch.tokens and got + ch.tokens > most:
                                raise Malformed(f"{got + ch.tokens:,} output tokens streamed for a request of "
                                                f"max_tokens {want} (implausible; not recorded)")
                            if ch.tokens:
                                # several tokens in one event: spread them over the gap since the
                                # previous token (bench_serving's convention); the first token is
                                # the event's arrival
                                prev = r.token_s[-1] if r.token_s else t
                                k = ch.tokens
                                r.token_s.extend(prev + (t - prev) * (j + 1) / k for j in range(k))
                                got += k
                        held = self.held.hold(held, max(0, len(buf) - FREE_PER_STREAM))
                        if finished:
                            break
                    r.stream_end_s = self.now()
        except asyncio.TimeoutError:
            r.drop_reason, r.error = "timeout", f"no complete answer within {self.cfg.timeout_s:g} s"
            return
        except asyncio.CancelledError:
            r.drop_reason, r.error = "cancelled", "interrupted (Ctrl-C)"
            return
        except aiohttp.ClientError as err:
            r.drop_reason, r.error = "connection_error", f"{type(err).__name__}: {err}"[:300]
            return
        except Malformed as err:  # this answer is broken; the run's other requests stand
            r.drop_reason, r.error = "malformed_stream", str(err)[:300]
            return
        except Exception as err:  # noqa: BLE001 - one request's failure never loses the run's results
            r.drop_reason, r.error = "client_error", f"{type(err).__name__}: {err}"[:300]
            return
        finally:
            self.held.hold(held, 0)
        if r.drop_reason is None and got < want:
            r.drop_reason = "short_output"
            r.error = f"{got} tokens streamed, {want} asked (finish_reason {r.finish_reason or 'none'})"
