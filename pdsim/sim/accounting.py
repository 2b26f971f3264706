"""The end of a world's run (mixed into World, world.py): the conservation laws every run
must keep (requests in = finished + dropped with a reason; pages, queues, batches, buffers and
flows empty) and the RunRecord the run returns (record.py).
"""
from __future__ import annotations

import numpy as np

from .engine.instance import Instance
from .kv.tiers import background_write_done
from .record import STEP_COLUMNS, DecodeEnds, InstanceInfo, RunRecord, StepTokens


class Accounting:
    """Conservation check and the RunRecord at the end of a run."""

    def _check_conservation(self, n: int, created: int, cut: bool) -> None:
        """Test mode (PDSIM_CHECK=1): every request finished or dropped with a reason, and,
        unless the horizon cut the run, every page, queue, batch, buffer and flow empty."""
        errors = []
        cols = self.ledger.cols
        if created + int((cols["drop_reason"] == "not_arrived_by_end").sum()) != n:
            errors.append(f"{n - created} requests never created")
        if self.ledger.written != n:
            errors.append(f"{self.ledger.written} requests written to the record, {n} expected")
        dropped = np.asarray([r is not None for r in cols["drop_reason"]], dtype=bool)
        finished = ~np.isnan(cols["finish_s"])
        undone = np.flatnonzero(~dropped & ~finished).tolist()
        if undone:
            errors.append(f"requests neither finished nor dropped: {undone[:5]}")
        both = np.flatnonzero(dropped & finished).tolist()
        if both:
            errors.append(f"requests both finished and dropped: {both[:5]}")
        stuck = np.flatnonzero(cols["drop_reason"] == "stuck").tolist()
        if stuck:
            errors.append(f"stuck requests: {stuck[:5]}")
        if not cut:
            for i in self.instances:
                cached = i.cache.evictable_pages if i.cache is not None else 0
                if i.pool.used != cached:
                    errors.append(f"{i.name}: {i.pool.used} KV pages in use at the end, {cached} of them cached")
                b = i.batch
                if b.n or b.sum_ctx or b.rem_out or b.running:
                    errors.append(f"{i.name}: running batch not empty ({b.n} requests)")
                if i.pq_count or i.pq_tokens or i.prealloc_q or i.ready_q:
                    errors.append(f"{i.name}: queues not empty")
                if i.holding or i.limbo:
                    errors.append(f"{i.name}: {len(i.holding)} requests still held, {len(i.limbo)} in limbo")
                if i.buffer is not None and any(v > 1e-6 for v in i.buffer.used.values()):
                    errors.append(f"{i.name}: receive buffer holds {i.buffer.used}")
            # a background tier write may outlive the last request (the run ends with it); any
            # other flow left is a transfer a request lost
            leaked = [f for f in self.fabric.flows.values() if f.on_done is not background_write_done]
            if leaked:
                errors.append(f"{len(leaked)} flows still on the fabric")
        if errors:
            raise RuntimeError("conservation broken in " + self.resolved.name + ": " + "; ".join(errors))

    def _record(self, wall: float) -> RunRecord:
        """The run's plain arrays (see record.py): no simulation object survives the run."""
        cols = self.ledger.cols
        if self.egress_s:  # every token reaches the client egress_s after its engine emits it
            for c in ("first_token_s", "finish_s"):
                cols[c] = cols[c] + self.egress_s
        # on placed host cores the first token's way out shares them: its wait beyond egress_s
        # moves the request's whole stream (its gaps stay the engine's; world.first_token)
        shift = self.egress_extras() if self.builder.host_cores is not None and self.egress_s else None
        if shift is not None:
            for c in ("first_token_s", "finish_s"):
                cols[c] = cols[c] + shift
        cores = self.builder.host_cores
        if cores is not None:
            # a step still running on a shared core when the world stops (its last request given up
            # mid-step) logged its price; it ends later, at the core's share: log when, so that it is
            # not read as a decode step that ended (_decode_ends). The newest row is always still in the
            # staging lists (columns.py: a log flushes before it appends)
            dur = STEP_COLUMNS.index("step_s")
            for i in self.instances:
                job = i._core_job
                if job is not None and not job.done.triggered and i._step_start >= 0:
                    i.steps.lists[dur][-1] = cores.finish_time(job) - i._step_start
        infos = [InstanceInfo(i.name, i.role, i.gpus, i.pool.capacity, i.pool.peak, i.busy_time, i.tokens_out,
                              i.retractions) for i in self.instances]
        steps = [i.steps.columns() for i in self.instances]
        tokens = StepTokens(*self.ledger.segments(), DecodeEnds([self._decode_ends(i, st) for i, st in zip(self.instances, steps)]),
                            first_shift=shift)
        tier_usage = []
        for inst in self.instances:
            if inst.tier_log and inst.cache is not None:
                t = np.asarray([x[0] for x in inst.tier_log])
                used = np.asarray([x[1] for x in inst.tier_log])
                for j, tier in enumerate(inst.cache.tiers.tiers):
                    tier_usage.append((tier.name, tier.capacity, t, used[:, j]))
        link_names = sorted(self.fabric.capacity)
        # the fabric's codes (first use) -> positions in the sorted link names
        remap = np.zeros(max(len(self.fabric.link_codes), 1), dtype=np.int32)
        index = {k: j for j, k in enumerate(link_names)}
        for name, c in self.fabric.link_codes.items():
            remap[c] = index[name]
        link_usage = self.fabric.usage_log.columns()
        link_usage["link"] = remap[link_usage["link"]]
        caches = [i.cache for i in self.instances if i.cache is not None]
        stats = {"tiers": [t.stats() for t in self._all_tiers()],
                 "caches": {i.name: {"lookup_tokens": i.cache.lookup_tokens, "hit_tokens": i.cache.hit_tokens,
                                     "evicted_blocks": i.cache.evicted_blocks}
                            for i in self.instances if i.cache is not None},
                 "buffers": {i.name: i.buffer.stats() for i in self.instances if i.buffer is not None},
                 "block_tokens": caches[0].block_tokens if caches else 0,
                 "events": [{"time_s": t, "kind": k, "what": w, "detail": d} for t, k, w, d in self.events],
                 "retries_by_cause": dict(self.retry_causes),
                 "capacity_gpus": [(t, g) for t, g in self.capacity_log],
                 "gpu_hours": self._gpu_hours(self.capacity_log),
                 "allocated_gpu_hours": self._gpu_hours(self.alloc_log),
                 "allocated_gpus": [(t, g) for t, g in self.alloc_log]}
        sc = self.resolved.scenario
        gpus = sum(i.gpus for i in self.instances) + (self.experts.gpus if self.experts else 0)
        slo = {k: getattr(sc.slo, k) for k in ("ttft_ms", "itl_ms", "max_itl_ms", "tpot_ms", "e2e_ms")}
        meta = {"source": self.resolved.source, "description": sc.description, "hardware": self.hw.name,
                "model": self.model.name, "seed": sc.seed}
        return RunRecord(sc.name, "simulated", cols, tokens, infos, gpus, gpus / self.hw.gpus_per_node, slo,
                         self.env.now, wall, sum(len(i.steps) for i in self.instances), self.disaggregated, steps,
                         tier_usage, link_usage, link_names, dict(self.fabric.capacity), stats, meta)

    def _decode_ends(self, inst: Instance, steps: dict[str, np.ndarray]) -> tuple:
        """How to read ``inst``'s decode-step end times from its step log (record.DecodeEnds:
        start + duration of each logged step with a decode batch, but those a failure cut
        short; the engine computed each end as exactly that sum, clock.py), checked here
        against the decode steps it ran."""
        cut = tuple(inst.cut_steps)
        n = DecodeEnds.done_count(steps, self.env.now, cut)
        if n != inst.batch.step:  # pragma: no cover - a bookkeeping bug, never a user error
            raise RuntimeError(f"{inst.name}: {n} decode-step ends for {inst.batch.step} decode steps")
        return steps, self.env.now, cut, self.egress_s

    def _gpu_hours(self, log) -> float:
        """GPU-hours of a (time, GPUs) log up to the end of the run."""
        total, (t0, g0) = 0.0, log[0]
        for t, g in log[1:]:
            total += g0 * (t - t0)
            t0, g0 = t, g
        total += g0 * (self.env.now - t0)
        return total / 3600.0

    def _all_tiers(self):
        seen, out = set(), []
        for st in self.builder.tier_stacks:
            for t in st.tiers:
                if id(t) not in seen:
                    seen.add(id(t))
                    out.append(t)
        return out
