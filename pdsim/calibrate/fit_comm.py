"""Fits of the communication models: DeepEP (costs/deepep.py; the low-latency kernels with their
per-remote-pair cost), NCCL all-reduce (ring form,
costs/calibrated.py) and the Mooncake transfer engine (costs/transfer.py).

All three are linear in their unknowns once written per byte (a fixed latency plus bytes over
a bandwidth), so they are non-negative least squares on relative error, except DeepEP's
kernels, whose legs overlap (the slower bounds the kernel: the low-latency kernels' SM copies
over NVLink beside the NIC's RDMA transfer; the normal kernels' RDMA beside the NVLink
forwarding), fitted with bounded non-linear least squares on log error.
"""
from __future__ import annotations

import numpy as np

from ..costs.comm import deepep_legs, deepep_reported_bytes
from ..costs.deepep import ELEM_BYTES, remote_pairs
from .lsq import evaluate, fit_log, heldout_mask, mape, nnls_rel


def legs(rows, elem: float, dedup: bool) -> np.ndarray:
    """(NVLink bytes, RDMA bytes) per rank of each row (comm.deepep_legs)."""
    return np.array([deepep_legs(r.tokens_per_rank, int(r.hidden), int(r.top_k), int(r.ep_size), int(r.gpus_per_node),
                                 elem, dedup) for r in rows.itertuples()]).reshape(-1, 2)


def _keys(rows):
    return list(zip(rows["ep_size"], rows["tokens_per_rank"]))


def _pairs(rows) -> np.ndarray:
    """Remote (local expert, rank) pairs of each row (deepep.remote_pairs)."""
    return np.array([remote_pairs(float(r.experts), int(r.ep_size), int(r.gpus_per_node)) for r in rows.itertuples()])


def _ll_pairs_identified(rows, pairs: np.ndarray) -> bool:
    """The per-pair cost is separable from the RDMA bytes only where token counts vary across
    rows with remote pairs (at one token count both grow as 1 - gpn/ep) and an intranode row
    pins the base."""
    remote = pairs > 0
    return bool(remote.any() and (~remote).any() and rows.loc[remote, "tokens_per_rank"].nunique() > 1)


def _ll_model(lg: np.ndarray, pairs: np.ndarray, overlap: bool = True):
    """deepep.ll_time_s in microseconds as a function of (base, pair_us, nvl_gbps, rdma_gbps):
    the SMs' NVLink copies and the NIC's RDMA transfer overlap (``overlap``), or add (the form
    before the overlap was read in DeepEP's code, kept for the held-out comparison)."""
    def f(p, s=slice(None)):
        b, pr, n, r = p
        nvl, rdma = lg[s, 0] / (n * 1e3), lg[s, 1] / (r * 1e3)
        return b + pr * pairs[s] + (np.maximum(nvl, rdma) if overlap else nvl + rdma)
    return f


def fit_deepep_ll(rows, op: str, base_us: float | None = None, base_label: str = "",
                  pair_us: float | None = None) -> dict | None:
    """t_us = base + pair_us x remote pairs + max(nvl_bytes/nvl_bw, rdma_bytes/rdma_bw)
    (deepep.ll_time_s), unknowns (base, pair_us, nvl_bw, rdma_bw), bounded non-linear least
    squares on log error (the max is not linear).

    A table at one token count (the DeepEP README's H800 table: 128 tokens, EP8..EP256)
    cannot separate the fixed latency from the NVLink term, nor the per-pair cost from the RDMA
    bytes; then ``base_us`` / ``pair_us`` (the same kernel's constants fitted where token counts
    vary) are held fixed and marked so (``base_from`` / ``pair_from``: borrowed). A table with no
    remote pair (one node) takes ``pair_us`` the same way, for its multi-node use.

    ``heldout_ep_mape``: leave-one-EP-out over the multi-node EP sizes (the intranode EP cannot
    be left out: nothing else pins the NVLink bandwidth), for this form and, as
    ``old_form_heldout_ep_mape``, for the form before (a constant base, the two legs added):
    the check that the EP-dependent term predicts an EP size it did not see."""
    rows = rows[rows["use"] & rows[f"{op}_us"].notna()]
    if rows.empty:
        return None
    lg = legs(rows, ELEM_BYTES[op], dedup=False)
    pairs = _pairs(rows)
    y = rows[f"{op}_us"].to_numpy(float)
    has_rdma = bool((lg[:, 1] > 0).any())
    fit_pair = _ll_pairs_identified(rows, pairs)
    fixed = rows["tokens_per_rank"].nunique() == 1 and base_us is not None
    held_pair = float(pair_us) if (not fit_pair and pair_us is not None) else 0.0
    free = (not fixed, fit_pair, True, has_rdma)  # which of (base, pair, nvl, rdma) are fitted
    x0, lo, hi = [12.0, 0.05, 200.0, 40.0], [0.0, 0.0, 1.0, 1.0], [500.0, 5.0, 5000.0, 500.0]
    held_vals = [base_us if fixed else 0.0, held_pair, 0.0, 1.0]

    def unpack(q):
        it = iter(q)
        return [next(it) if f else v for f, v in zip(free, held_vals)]

    def pick(vals):
        return [v for f, v in zip(free, vals) if f]
    model = _ll_model(lg, pairs)
    held = heldout_mask(_keys(rows)) if len(rows) >= 12 else None
    q, st = evaluate(lambda m: fit_log(lambda q: model(unpack(q), m), y[m], [pick(x0)], pick(lo), pick(hi)),
                     lambda q: model(unpack(q)), y, held)
    b, pr, n, r = unpack(q)
    out = {"base_us": float(b), "nvl_gbps": float(n), "rdma_gbps": float(r) if has_rdma else float("nan"), **st,
           "data": "calibration/data/deepep_low_latency.csv"}
    if fit_pair:
        out["pair_us"] = float(pr)
        ep_out = _leave_one_ep_out(rows, lg, pairs, y)
        if ep_out is not None:
            out["heldout_ep_mape"], out["old_form_heldout_ep_mape"] = ep_out
    elif pair_us is not None:
        out["pair_us"] = float(pair_us)
        why = "no multi-node row" if not pairs.any() else "one token count: collinear with the RDMA bytes"
        out["pair_from"] = f"borrowed: held at the {base_label} fit ({why})".replace("  ", " ")
    if fixed:
        out["base_from"] = f"held at the {base_label} fit (one token count in the data)".replace("  ", " ")
    return out


def _leave_one_ep_out(rows, lg, pairs, y) -> tuple[float, float] | None:
    """Mean |relative error| on each multi-node EP size predicted by a fit without it: this form
    (per-pair cost, overlapping legs), and the form before (constant base, legs added)."""
    eps = sorted(rows.loc[pairs > 0, "ep_size"].unique())
    if len(eps) < 3:  # the held-out EP needs two others to pin the per-pair cost
        return None
    ep = rows["ep_size"].to_numpy()
    new, old = _ll_model(lg, pairs), _ll_model(lg, pairs, overlap=False)
    errs: dict[str, list] = {"new": [], "old": []}
    for e in eps:
        m = ep != e
        q = fit_log(lambda q: new(q, m), y[m], [[12.0, 0.05, 200.0, 40.0]], [0.0, 0.0, 1.0, 1.0], [500.0, 5.0, 5000.0, 500.0])
        errs["new"].append(mape(new(q)[~m], y[~m]))
        q = fit_log(lambda q: old([q[0], 0.0, q[1], q[2]], m), y[m], [[12.0, 200.0, 40.0]], [0.0, 1.0, 1.0],
                    [500.0, 5000.0, 500.0])
        errs["old"].append(mape(old([q[0], 0.0, q[1], q[2]])[~m], y[~m]))
    return float(np.mean(errs["new"])), float(np.mean(errs["old"]))


def fit_deepep_normal(rows, op: str, base_us: float | None = None, nvl_gbps: float | None = None,
                      base_label: str = "") -> dict | None:
    """t_us = base + nvl_bytes/nvl_bw (one node) or base + max(nvl_fwd/nvl_bw, rdma/rdma_bw) (several nodes)
    on kernel times (deepep.normal_time_s), the bytes those that cross a link; bandwidth-only
    rows (DeepEP README: bottleneck GB/s at 4096 tokens) become times as DeepEP's *reported*
    bytes / bandwidth (comm.deepep_reported_bytes: its benchmark counts the local node and the
    rank's own rows too), so the fitted bandwidths apply to link-crossing bytes. Unknowns the
    rows cannot pin (the latency where every row has 4096 tokens, or NVLink where no row is
    intranode) are held at the given values and marked so."""
    rows = rows[rows["use"]]
    gb = rows[f"{op}_gbps"].astype(float) if f"{op}_gbps" in rows else None
    us = rows[f"{op}_us"].astype(float)
    rows = rows[us.notna() | (gb.notna() if gb is not None else False)]
    if rows.empty:
        return None
    lg = legs(rows, ELEM_BYTES[op], dedup=True)
    t = rows[f"{op}_us"].to_numpy(float)
    if gb is not None:
        bw = rows[f"{op}_gbps"].to_numpy(float)
        rep = np.array([deepep_reported_bytes(r.tokens_per_rank, int(r.hidden), int(r.top_k), int(r.ep_size),
                                              int(r.gpus_per_node), ELEM_BYTES[op]) for r in rows.itertuples()]).reshape(-1, 2)
        leg_bytes = np.where(rows["leg"].to_numpy() == "nvlink", rep[:, 0], rep[:, 1])
        t = np.where(np.isnan(t), leg_bytes / (bw * 1e9) * 1e6, t)
    has_intra, has_inter = (lg[:, 1] == 0).any(), (lg[:, 1] > 0).any()
    fix_base = rows["tokens_per_rank"].nunique() == 1 and base_us is not None
    fix_nvl = not has_intra and nvl_gbps is not None

    def unpack(p):
        it = iter(p)
        b = base_us if fix_base else next(it)
        n = nvl_gbps if fix_nvl else next(it)
        r = next(it) if has_inter else 1.0
        return b, n, r

    def model(p, s=slice(None)):  # deepep.normal_time_s: NVLink inside a node, the slower leg across nodes
        b, n, r = unpack(p)
        nvl = lg[s, 0] / (n * 1e3)
        return b + np.where(lg[s, 1] > 0, np.maximum(nvl, lg[s, 1] / (r * 1e3)), nvl)

    x0 = ([] if fix_base else [20.0]) + ([] if fix_nvl else [150.0]) + ([40.0] if has_inter else [])
    lo = ([] if fix_base else [0.0]) + ([] if fix_nvl else [1.0]) + ([1.0] if has_inter else [])
    hi = ([] if fix_base else [500.0]) + ([] if fix_nvl else [2000.0]) + ([500.0] if has_inter else [])
    held = heldout_mask(_keys(rows)) if len(rows) >= 12 else None
    inter = lg[:, 1] > 0  # leave-one-out only where another row of the same regime remains
    loo = np.where(inter, inter.sum() > 1, (~inter).sum() > 1)
    p, st = evaluate(lambda m: fit_log(lambda q: model(q, m), t[m], [x0], lo, hi), model, t, held, loo)
    b, n, r = unpack(p)
    out = {"base_us": float(b), "nvl_gbps": float(n), "rdma_gbps": float(r) if has_inter else float("nan"), **st,
           "data": "calibration/data/deepep_normal.csv"}
    if fix_base:
        out["base_from"] = f"held at the {base_label} fit (one token count in the data)".replace("  ", " ")
    if fix_nvl:
        out["nvl_from"] = "held fixed (no intranode row)"
    return out


def fit_allreduce(rows, gpn: int) -> dict | None:
    """NCCL all-reduce, t = base + 2 (n-1) lat + 2 (n-1)/n x bytes / busbw (a launch cost, a
    latency per ring hop, NCCL's bus-bandwidth term), on timed rows inside a node (unknowns
    base, lat, 1/busbw); large-message bus-bandwidth rows give busbw directly (inside a node and
    across nodes). NCCL switches algorithm and protocol with the message size; one latency
    pair and one bandwidth is the simplification, its error reported."""
    rows = rows[rows["use"] & (rows["op"] == "all_reduce")]
    if rows.empty:
        return None
    out: dict = {"data": "calibration/data/nccl_collectives.csv"}
    timed = rows[rows["us"].notna() & (rows["nodes"] == 1)]
    if len(timed):
        n = timed["gpus"].to_numpy(float)
        nb = timed["message_bytes"].to_numpy(float)
        y = timed["us"].to_numpy(float)
        X = np.column_stack([np.ones_like(n), 2 * (n - 1), 2 * (n - 1) / n * nb * 1e-3])  # us, busbw in GB/s
        held = heldout_mask(list(zip(timed["gpus"], timed["message_bytes"])))
        c, st = evaluate(lambda m: nnls_rel(X[m], y[m]), lambda c: X @ c, y, held)
        out.update(base_us=float(c[0]), latency_us=float(c[1]), intranode_gbps=float(1.0 / c[2]), **st)
    big = rows[rows["us"].isna() & rows["busbw_gbps"].notna()]
    intra = big.loc[big["nodes"] == 1, "busbw_gbps"]
    inter = big.loc[big["nodes"] > 1, "busbw_gbps"]
    if len(intra):
        out["intranode_gbps"] = float(intra.mean())
        out["intranode_from"] = "large-message bus bandwidth row"
    if len(inter):
        out["internode_gbps"] = float(inter.mean())
    return out if ("intranode_gbps" in out or "internode_gbps" in out) else None


def _line(rows) -> np.ndarray:
    """Line rate (bytes/s) of the NICs a row's senders use: ``nics`` x ``nic_gbit``. The
    simulator's rate is the same quantity (costs/transfer.py ``flow_cap``: senders x each
    GPU's NIC share), so a fitted efficiency means the same thing in both."""
    return rows["nics"].to_numpy(float) * rows["nic_gbit"].to_numpy(float) / 8 * 1e9


def fit_mooncake(rows, chunk_rows=None, per_chunk_us: float | None = None) -> dict | None:
    """One model for fit and simulation (costs/transfer.py, sim/transports/base.py):
    t_ms = setup + chunks x per_chunk + bytes / (eff x line rate of the senders' NICs), where
    ``chunks`` is the work requests each sender posts (one per contiguous region: a fresh
    pool's prompt is one run, so layers x K/V parts; the ``chunks`` column of the single rows).

    Rows: the single batched transfers (1P1D, concurrency 1) of ``rows`` and the batched
    transfers of known chunk count in ``chunk_rows`` (kv_transfer_chunks.csv, backend
    mooncake), fitted jointly by non-negative least squares on relative error: the single rows
    pin setup + their few chunks and the bandwidth, the many-chunk rows the per-chunk cost.
    Without chunk rows of its own a system takes ``per_chunk_us`` (another system's joint fit:
    the posting cost is the transfer engine's software) and fits setup and eff on the rest.
    Held out: leave-one-out over the single rows (no other row pins the per-chunk cost).
    ``per_page_us``: one synchronous transfer per chunk on the old per-page path, from the
    per-page vs batched pair of the same DeepSeek-V3 transfer (157 pages x 61 layers)."""
    from ..specs.errors import SpecError

    single = rows[rows["use"] & (rows["mode"] == "batched") & (rows["regime"] == "single")]
    if len(single) < 2:
        return None
    if "chunks" not in single or single["chunks"].isna().any():
        raise SpecError("single-transfer rows need 'chunks' (work requests per sender)",
                        source="calibration/data/mooncake_transfer.csv")
    ch = chunk_rows[chunk_rows["use"] & (chunk_rows["backend"] == "mooncake")] if chunk_rows is not None else None
    ch = ch if ch is not None and len(ch) else None

    def design(r):  # columns: setup (ms), per-chunk (us -> ms), 1/eff (ms at line rate)
        return np.column_stack([np.ones(len(r)), r["chunks"].to_numpy(float) * 1e-3,
                                r["bytes"].to_numpy(float) / _line(r) * 1e3])
    X = design(single)
    y = single["ms"].to_numpy(float)
    loo = np.ones(len(single), bool)
    if ch is not None:
        X = np.vstack([X, design(ch)])
        y = np.concatenate([y, ch["ms"].to_numpy(float)])
        loo = np.concatenate([loo, np.zeros(len(ch), bool)])
        cols, held_pc = [0, 1, 2], None
    else:
        cols, held_pc = [0, 2], per_chunk_us
    y_fit = y - (X[:, 1] * held_pc if held_pc is not None else 0.0)
    Xf = X[:, cols]

    def predict(c):
        return Xf @ c + (X[:, 1] * held_pc if held_pc is not None else 0.0)
    held = heldout_mask(list(single["bytes"])) if len(single) >= 12 and ch is None else None
    c, st = evaluate(lambda m: nnls_rel(Xf[m], y_fit[m]), predict, y, held, loo if ch is not None else None)
    coef = dict(zip(cols, c))
    out = {"setup_ms": float(coef[0]), "eff": float(1.0 / coef[2]), **st,
           "data": "calibration/data/mooncake_transfer.csv"}
    if ch is not None:
        out["per_chunk_us"] = float(coef[1])
        out["per_chunk_from"] = ("joint fit with calibration/data/kv_transfer_chunks.csv (a loaded 3P9D transfer: "
                                 "an upper bound of the posting cost)")
    elif per_chunk_us is not None:
        out["per_chunk_us"] = float(per_chunk_us)
        out["per_chunk_from"] = "held at the joint fit of the systems with chunk rows (the engine's software cost)"
    pair = rows[rows["note"].str.contains("page 64", regex=False)]
    per_page, batched = pair[pair["mode"] == "per_page"], pair[pair["mode"] == "batched"]
    if len(per_page) and len(batched):
        pages, layers = -(-10000 // 64), 61
        out["per_page_us"] = float((per_page["ms"].iloc[0] - batched["ms"].iloc[0]) * 1e3 / (pages * layers))
    return out


def mooncake_per_chunk_us(rows, chunk_rows) -> float | None:
    """The per-chunk posting cost of the joint fits of every system with chunk rows (mean),
    for systems without any (``fit_mooncake(per_chunk_us=...)``)."""
    vals = []
    for hw in sorted(set(chunk_rows.loc[chunk_rows["use"] & (chunk_rows["backend"] == "mooncake"), "hardware"])):
        p = fit_mooncake(rows[rows["hardware"] == hw], chunk_rows[chunk_rows["hardware"] == hw])
        if p is not None and "per_chunk_us" in p:
            vals.append(p["per_chunk_us"])
    return float(np.mean(vals)) if vals else None
