"""Mixed steps (prefill chunk + decodes) measured on a real engine against the step contract.

``calibration/data/cpu_mixed_steps.csv`` (calibration/microbench/cpu_mixed_steps.py) holds steps
timed on vLLM's CPU build: ``mixed`` (``batch`` decodes at ``context`` tokens + one
``chunk_tokens``-token prompt chunk in one step), ``decode`` (the same batch with no chunk,
the steps just before) and ``prefill`` (the chunk alone on the idle engine: TTFT minus the
measured request path). Each is priced with the step model the simulator runs for the row's
profile (``hardware``: a key or a path from the repository root) through the one step contract,
``StepCost.step_time(prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx)``,
with the prefill chunk's causal attention work ``chunk^2 / 2``. The report also sets the chunk's
measured increment (mixed - decode) beside its priced one. Milliseconds. No fit reads the file.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

FILE = "cpu_mixed_steps.csv"


def _cost(profile: str, root: Path):
    from ..costs.registry import build_step_cost
    from ..specs.catalog import load_hardware_ref, load_model_ref
    from ..specs.scenario import EngineSpec, GroupSpec

    ref = str(root / profile) if (root / profile).is_file() else profile
    return build_step_cost("auto", load_hardware_ref(ref), load_model_ref("tiny-llama"),
                           GroupSpec(gpus=1, engine=EngineSpec(cuda_graph_max_bs=0)), "colocated")


def priced_ms(cost, kind: str, batch: int, context: float, chunk: int) -> float:
    """The step contract's price of one measured row (ms)."""
    if kind == "decode":
        return cost.step_time(0, 0.0, 0, batch, float(batch * context)) * 1e3
    if kind == "prefill":
        return cost.step_time(chunk, chunk * chunk / 2.0, 1, 0, 0.0) * 1e3
    return cost.step_time(chunk, chunk * chunk / 2.0, 1, batch, float(batch * context)) * 1e3


def comparison(path: str | Path | None = None) -> pd.DataFrame:
    """The measured rows with ``priced_ms`` and ``error`` = (priced - measured) / measured."""
    from .data import data_dir

    path = Path(path) if path is not None else data_dir() / FILE
    if not path.is_file():
        return pd.DataFrame()
    df = pd.read_csv(path)
    root = data_dir().parent.parent
    costs = {h: _cost(h, root) for h in df["hardware"].unique()}
    df["priced_ms"] = [priced_ms(costs[r.hardware], r.kind, int(r.batch), float(r.context), int(r.chunk_tokens))
                       for r in df.itertuples()]
    df["error"] = (df["priced_ms"] - df["measured_ms"]) / df["measured_ms"]
    return df


def mixed_report(path: str | Path | None = None) -> str:
    df = comparison(path)
    if df.empty:
        return f"== mixed steps: no {FILE} measured"
    first = df.iloc[0]
    lines = [f"== mixed steps ({FILE}): {first.engine}, {first.cpu}, {first.date}; {first.pinning}",
             f"  priced with {', '.join(df['hardware'].unique())} (StepCost.step_time); ms, spread = min-max over "
             "samples"]
    for r in df.itertuples():
        what = {"mixed": f"B={r.batch} decodes + {r.chunk_tokens}-token chunk",
                "decode": f"B={r.batch} decodes (pure)", "prefill": f"{r.chunk_tokens}-token prefill alone"}[r.kind]
        ctx = f" ctx {r.context}" if r.kind != "prefill" else ""
        lines.append(f"  {r.kind:<8}{what + ctx:<44} measured {r.measured_ms:>8.2f} ({r.spread_lo_ms:.2f}-"
                     f"{r.spread_hi_ms:.2f}, n={r.samples}) priced {r.priced_ms:>8.2f}  {r.error:+.1%}")
    rows = list(df.itertuples())
    pairs = []  # each mixed row with the pure decode row measured beside it (the next one of its batch)
    for i, r in enumerate(rows):
        if r.kind == "mixed":
            d = next((x for x in rows[i + 1:] if x.kind == "decode" and x.batch == r.batch), None)
            if d is not None:
                pairs.append((r, d))
    if pairs:
        lines.append("  the chunk's increment over the same batch's pure decode step (mixed - decode):")
    for r, d in pairs:
        m_inc, p_inc = r.measured_ms - d.measured_ms, r.priced_ms - d.priced_ms
        err = f"  ({(p_inc - m_inc) / m_inc:+.1%})" if m_inc > 0 else ""
        lines.append(f"    B={r.batch:<3} chunk {r.chunk_tokens:<5} measured {m_inc:+.2f} ms, priced {p_inc:+.2f} ms"
                     + err)
    return "\n".join(lines)
