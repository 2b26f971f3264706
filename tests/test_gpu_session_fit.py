"""What a GPU session's rows feed (issue 28): the measured copy and launch constants (fit_system.py
-> calibration.memcopy / calibration.host -> the calibrated step model and the offload tiers), and
the whole-forward section of `pdsim calibrate report` (forward_report.py)."""
from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from builders import load_script

from pdsim.calibrate.fit_system import fit_host, fit_memcopy
from pdsim.calibrate.forward_report import forward_comparison, forward_report
from pdsim.costs import build_step_cost
from pdsim.costs.measured import host_copy_bps, with_measured_system
from pdsim.specs.catalog import load_hardware_ref, load_model_ref
from pdsim.specs.scenario import EngineSpec, GroupSpec


def _copies(kinds: dict[str, tuple[float, float]], factor: dict[str, int]) -> pd.DataFrame:
    rows = []
    for kind, (lat_us, gbps) in kinds.items():
        for mb in (4, 16, 64, 256, 1024):
            n = mb * 2**20
            t = factor[kind] * n
            rows.append({"hardware": "h100", "kind": kind, "bytes": n, "traffic_bytes": t, "us": lat_us + t / gbps / 1e3})
    return pd.DataFrame(rows).assign(use=True)


def test_memcopy_fit_recovers_bandwidths_and_the_hbm_fraction():
    hw = load_hardware_ref("h100")
    truth = {"d2d": (5.0, 2800.0), "h2d_pinned": (8.0, 53.0), "d2h_pinned": (8.0, 50.0), "h2d_pageable": (20.0, 20.0)}
    p = fit_memcopy(_copies(truth, {"d2d": 2, "h2d_pinned": 1, "d2h_pinned": 1, "h2d_pageable": 1}), hw)
    # bandwidth from the largest copies (their fixed cost is < 1% of the time), latency from the smallest
    assert p["d2d_gbps"] == pytest.approx(2800.0, rel=0.01) and p["h2d_pageable_gbps"] == pytest.approx(20.0, rel=0.01)
    assert p["hbm_eff"] == pytest.approx(2800.0 / hw.gpu.hbm_gbps, rel=0.01)
    assert p["host_copy_gbps"] == pytest.approx(50.0, rel=0.01)  # the slower pinned direction
    assert p["fit_mape"] < 0.01 and p["label"] == "measured" and "d2h_pageable_gbps" not in p


def test_host_fit_takes_the_issue_cost_per_kernel_from_the_host_bound_eager_step():
    rows = pd.DataFrame([
        {"kind": "launch_host", "batch": 1, "layers": None, "us": 4.0},
        {"kind": "launch_gpu", "batch": 1, "layers": None, "us": 2.5},
        {"kind": "decode_step_eager", "batch": 1, "layers": 32, "kernels": 32 * 40, "us": 32 * 150.0},
        {"kind": "decode_step_graph", "batch": 1, "layers": 32, "us": 32 * 50.0},
        {"kind": "decode_step_eager", "batch": 64, "layers": 32, "us": 32 * 200.0},
        {"kind": "decode_step_graph", "batch": 64, "layers": 32, "us": 32 * 170.0}]).assign(use=True)
    p = fit_host(rows)
    assert p["kernel_launch_us"] == 4.0 and p["launch_gpu_us"] == 2.5
    assert p["eager_exposed_us"] == pytest.approx(100.0) and p["eager_exposed_us_b64"] == pytest.approx(30.0)
    # batch 1 is host-bound: the eager step is the issue time of its kernels, 150 us / 40 per layer
    assert p["eager_issue_us"] == pytest.approx(150.0)
    assert p["kernels_per_layer"] == 40 and p["eager_us_per_kernel"] == pytest.approx(150.0 / 40)
    assert fit_host(rows.iloc[0:0]) is None
    flat = fit_host(rows.drop(columns="kernels"))  # no profiler count: the flat per-layer issue time still
    assert flat["eager_issue_us"] == pytest.approx(150.0) and "eager_us_per_kernel" not in flat


def test_measured_constants_enter_the_calibrated_model_only():
    hw = load_hardware_ref("h100")
    cal = {**hw.calibration, "memcopy": {"hbm_eff": 0.9, "host_copy_gbps": 52.0},
           "host": {"eager_exposed_us": 1000.0, "eager_issue_us": 1300.0}}
    mhw = dataclasses.replace(hw, calibration=cal)
    eff = with_measured_system(mhw).efficiency
    assert eff.layer_launch_us == 1300.0  # no kernel count: the flat per-layer issue time (not eager - graph)
    assert eff.hbm == hw.efficiency.hbm  # a copy bounds the small kernels' efficiency, it does not measure it
    per_kernel = dataclasses.replace(hw, calibration={**cal, "host": {"eager_issue_us": 1300.0, "eager_us_per_kernel": 2.5}})
    e2 = with_measured_system(per_kernel).efficiency
    assert e2.kernel_launch_us == 2.5 and e2.layer_launch_us == hw.efficiency.layer_launch_us  # structural form
    assert host_copy_bps(mhw) == 52e9
    model, group = load_model_ref("llama-3.1-8b"), GroupSpec(gpus=1, engine=EngineSpec(cuda_graph_max_bs=0))
    roof = build_step_cost("roofline", hw, model, group, "decode").step_time(0, 0.0, 0, 1, 512.0)
    roof_m = build_step_cost("roofline", mhw, model, group, "decode").step_time(0, 0.0, 0, 1, 512.0)
    assert roof == roof_m  # the prior keeps the profile's priors
    base = dataclasses.replace(hw, calibration={k: v for k, v in hw.calibration.items() if k not in ("memcopy", "host")})
    plain = build_step_cost("calibrated", base, model, group, "decode").breakdown(0, 0.0, 0, 1, 512.0)
    measured = build_step_cost("calibrated", mhw, model, group, "decode").breakdown(0, 0.0, 0, 1, 512.0)
    # eager launches hide behind the step's GPU work (costs/step.py): the prior's 32 x 25 us issue
    # stays under the ~7 ms of a batch-1 step, exposing only the graph-replay floor; 32 x 1300 us
    # of issue exceeds it and shows as issue - GPU work
    assert plain["launch"] == pytest.approx(32 * hw.efficiency.graph_launch_us * 1e-6)
    gpu = sum(measured[k] for k in ("attn_proj", "mlp", "moe", "comm", "lm_head"))
    assert measured["launch"] == pytest.approx(32 * 1300.0 * 1e-6 - gpu)


def _forward_rows() -> pd.DataFrame:
    """Rows shaped as gpu_session.py --dry-run writes them, on the h100 profile."""
    rows = [{"hardware": "h100", "model": "llama-3.1-8b", "phase": "prefill", "batch": 1, "tokens": n, "context": n,
             "layers": 32, "us": 60.0 * n, "note": "random weights; transformers 5.17.0 LlamaForCausalLM, eager",
             "source": "dry-run (not a measurement)"} for n in (128, 2048)]
    rows += [{"hardware": "h100", "model": "llama-3.1-8b", "phase": "decode", "batch": b, "tokens": b, "context": c,
              "layers": 32, "us": 25000.0, "note": "random weights; repo TorchLlama (gpu_forward.py), eager",
              "source": "measured"} for b, c in ((1, 512), (32, 2048))]
    rows.append({"hardware": "cpu (dry run)", "model": "llama-3.1-8b", "phase": "decode", "batch": 1, "tokens": 1,
                 "context": 32, "layers": 2, "us": 1.0, "note": "", "source": "dry-run (not a measurement)"})
    return pd.DataFrame(rows)


def test_forward_section_prints_every_row_with_roofline_and_calibrated_side_by_side():
    df = _forward_rows()
    c = forward_comparison(df)
    assert len(c) == 4  # the row on no hardware profile is left out
    assert (c["roofline_ms"] > 0).all() and (c["calibrated_ms"] > 0).all()
    text = forward_report(df)
    body = [ln for ln in text.splitlines() if "measured " in ln]
    assert len(body) == 4 and all("roofline" in ln and "calibrated" in ln for ln in body)
    assert sum("dry run: not a measurement" in ln for ln in body) == 2
    assert "prefill 2048 tokens" in text and "decode batch 32 x 2048 ctx" in text
    assert "transformers eager" in text and "torch eager" in text and "prefill 2:" in text and "decode 2:" in text
    graph = df.iloc[[2]].assign(us=10000.0, note="repo TorchLlama (gpu_forward.py), CUDA graph replay")
    both = forward_report(pd.concat([df, graph], ignore_index=True))
    assert "torch graph" in both and "host ~15.0 ms (60%: measured - graph 10.00)" in both
    hf = pd.concat([df, df.iloc[[0]].assign(note="repo TorchLlama (gpu_forward.py), CUDA graph replay", us=5000.0)],
                   ignore_index=True)
    assert "beyond the torch graph 5.00: +2.7 ms (35%; host + transformers kernels)" in forward_report(hf)
    assert "no forward.csv rows" in forward_report(df.iloc[0:0])


def test_ingest_appends_measured_rows_once_and_refuses_dry_runs(tmp_path):
    from pdsim.calibrate import data
    from pdsim.specs import catalog

    mod = load_script(catalog.calibration_dir() / "ingest_session.py")
    session, out = tmp_path / "session", tmp_path / "data"
    session.mkdir()
    out.mkdir()
    att = pd.DataFrame([{"hardware": "h100", "phase": "decode", "batch": 1, "new_tokens": 1, "context": 1024, "heads": 32,
                         "kv_heads": 8, "head_dim": 128, "us": 12.0, "fit": None,
                         "note": "llama-3.1-8b TP1, torch SDPA backend flash; command: x", "source": "measured",
                         "software": "torch 2.11.0", "date": "2026-11-26"}])[data.columns("attention")]
    att.to_csv(session / "attention.csv", index=False)
    (out / "attention.csv").write_text(",".join(data.columns("attention")) + "\n")
    assert "1 rows (1 not fitted)" in mod.ingest(session, out)[0]
    got = pd.read_csv(out / "attention.csv")
    assert len(got) == 1 and got["fit"].iloc[0] == "no" and got["note"].iloc[0].startswith("not fitted: torch SDPA")
    with pytest.raises(SystemExit, match="already"):
        mod.ingest(session, out)
    att.assign(source="dry-run (not a measurement)").to_csv(session / "attention.csv", index=False)
    with pytest.raises(SystemExit, match="only measured rows"):
        mod.ingest(session, out)


def _ingest_module():
    from pdsim.specs import catalog

    return load_script(catalog.calibration_dir() / "ingest_session.py")


@pytest.mark.parametrize("body, match", [
    ("", "not a readable CSV"),  # empty file: was pandas' EmptyDataError traceback
    (b"\xff\xfe\x00garbage", "not a readable CSV"),  # not text: was a UnicodeDecodeError traceback
    ("{hdr}\nh100,decode,1,1,1024,32,8,128,12,,n,measured,torch,2026-11-26,x,y\n", "more fields than the header"),
    ("{hdr}\nh100,decode,1,1,1024,32,8,128,abc,,n,measured,torch,2026-11-26\n", "line 2: us: expected a finite"),
    ("{hdr}\nh100,decode,1,1,1024,32,8,128,-3,,n,measured,torch,2026-11-26\n", "line 2: us: expected a finite"),
    ("{hdr}\nh100,decode,1,1,1024,32,8,128,,,n,measured,torch,2026-11-26\n", "line 2: no measured value"),
    # a blank date was appended, after which data.load refused the whole attention.csv
    ("{hdr}\nh100,decode,1,1,1024,32,8,128,12,,n,measured,torch,\n", "line 2: date: every row needs provenance"),
])
def test_ingest_refuses_a_malformed_session_csv_in_one_line(tmp_path, body, match):
    from pdsim.calibrate import data

    mod = _ingest_module()
    session, out = tmp_path / "session", tmp_path / "data"
    session.mkdir()
    out.mkdir()
    hdr = ",".join(data.columns("attention"))
    f = session / "attention.csv"
    f.write_bytes(body) if isinstance(body, bytes) else f.write_text(body.format(hdr=hdr))
    with pytest.raises(SystemExit, match=match):
        mod.ingest(session, out)
    assert not (out / "attention.csv").exists()  # nothing appended


def test_ingest_cli_bad_input_exits_2_with_one_line(tmp_path):
    import subprocess
    import sys

    from pdsim.specs import catalog

    (tmp_path / "attention.csv").write_text("")
    with pytest.raises(SystemExit, match="--data .*: not a folder"):  # was pandas' OSError on writing
        _ingest_module().ingest(tmp_path, tmp_path / "nope")
    (tmp_path / "out").mkdir()
    p = subprocess.run([sys.executable, str(catalog.calibration_dir() / "ingest_session.py"), str(tmp_path),
                        "--data", str(tmp_path / "out"), "--check"], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and p.stderr.startswith("error: ") and "Traceback" not in p.stderr
    assert "not a readable CSV" in p.stderr


@pytest.mark.parametrize("change, match", [
    ({"model": "nope-model"}, "line 3: model: unknown model 'nope-model'"),  # named the scenario's field
    ({"layers": float("nan")}, "line 3: batch, tokens, context and layers"),  # was a ValueError traceback
    ({"phase": "train"}, "line 3: phase: expected prefill, decode or mixed"),  # was priced as a prefill
    ({"us": 0.0}, "line 3: us: expected a finite time > 0"),  # was a ZeroDivisionError traceback
])
def test_forward_section_names_the_line_of_a_row_it_cannot_price(change, match):
    from pdsim.specs.errors import SpecError

    df = _forward_rows()
    df.loc[1, list(change)] = list(change.values())
    with pytest.raises(SpecError, match=match) as err:
        forward_report(df)
    assert str(err.value).startswith("calibration/data/forward.csv: line 3")


@pytest.mark.parametrize("col, value", [("layers", "0"), ("kernels", "0"), ("kernels", "-44")])
def test_ingest_refuses_a_launch_row_whose_counts_the_host_fit_divides_by(tmp_path, col, value):
    """fit_system.fit_host divides the eager step by layers x kernels: a 0 there was appended
    and then divided by."""
    from pdsim.calibrate import data

    mod = _ingest_module()
    session, out = tmp_path / "session", tmp_path / "data"
    session.mkdir()
    out.mkdir()
    row = {"hardware": "h100", "kind": "decode_step_eager", "model": "llama-3.1-8b", "batch": "1", "context": "1024",
           "layers": "32", "kernels": "1408", "us": "20441", "source": "measured", "software": "torch",
           "date": "2026-11-26", col: value}
    cols = data.columns("launch")
    (session / "launch.csv").write_text(",".join(cols) + "\n" + ",".join(row.get(c, "") for c in cols) + "\n")
    with pytest.raises(SystemExit, match=f"line 2: {col}: expected a finite number > 0"):
        mod.ingest(session, out)
    assert not (out / "launch.csv").exists()


def test_forward_section_prices_a_mixed_step_and_what_batching_saves():
    """A mixed row (``batch`` decodes over ``context`` + one ``tokens``-token chunk, replayed as a
    CUDA graph) is priced by the one step contract with both parts, and the report sets the
    chunk's increment over the pure decode, and the saving against the chunk alone, beside their
    prices (issue 24 item 4 on a GPU: gpu_session.py family mixed_forward)."""
    graph = "repo TorchLlama (gpu_forward.py), CUDA graph replay"
    rows = pd.DataFrame([
        {"hardware": "h100", "model": "llama-3.1-8b", "phase": "decode", "batch": 32, "tokens": 32, "context": 2048,
         "layers": 32, "us": 12000.0, "note": graph, "source": "measured"},
        {"hardware": "h100", "model": "llama-3.1-8b", "phase": "prefill", "batch": 1, "tokens": 512, "context": 512,
         "layers": 32, "us": 18000.0, "note": graph, "source": "measured"},
        {"hardware": "h100", "model": "llama-3.1-8b", "phase": "mixed", "batch": 32, "tokens": 512, "context": 2048,
         "layers": 32, "us": 24000.0, "note": graph, "source": "measured"}])
    c = forward_comparison(rows).set_index("phase")
    # one pass over the weights for both parts: the mixed price is less than decode + chunk alone
    assert c.loc["decode", "calibrated_ms"] < c.loc["mixed", "calibrated_ms"] < (
        c.loc["decode", "calibrated_ms"] + c.loc["prefill", "calibrated_ms"])
    text = forward_report(rows)
    line = next(ln for ln in text.splitlines() if "mixed 32 x 2048 ctx + 512 chunk" in ln and "saves" in ln)
    assert "+ 12.00 ms measured" in line and "batching saves 6.00 ms measured" in line
    assert "mixed 1:" in text


def test_ingest_takes_a_proxy_rate_of_zero_and_writes_nothing_when_any_file_is_bad(tmp_path):
    """overlap.csv's proxy_gbps describes the point (0 for the spin proxy), not a measured value;
    and a session whose second file is bad leaves the first unwritten (it was appended, then the
    run stopped: a partial session in calibration/data)."""
    from pdsim.calibrate import data

    mod = _ingest_module()
    session, out = tmp_path / "s", tmp_path / "d"
    session.mkdir()
    out.mkdir()
    prov = {"fit": None, "source": "measured", "software": "torch 2.11.0", "date": "2026-11-26"}
    ov = pd.DataFrame([{"hardware": "h100", "kernel": "gemm_fp8", "shape": "m=4096 k=7168 n=4096", "held_sms": 24,
                        "beside": "proxy_spin_w32", "proxy_gbps": 0.0, "us": 300.0, "note": "x", **prov}])
    ov[data.columns("overlap")].to_csv(session / "overlap.csv", index=False)
    assert "overlap.csv: 1 rows" in mod.ingest(session, out)[0]
    ov.assign(proxy_gbps=-1.0, us=301.0)[data.columns("overlap")].to_csv(session / "overlap.csv", index=False)
    with pytest.raises(SystemExit, match="line 2: proxy_gbps: expected a finite number >= 0"):
        mod.ingest(session, out)
    fwd = pd.DataFrame([{"hardware": "h100", "model": "llama-3.1-8b", "phase": "mixed", "batch": 8, "tokens": 128,
                         "context": 2048, "layers": 32, "us": 12000.0, "note": "y", **prov}])
    fwd[data.columns("forward")].to_csv(session / "forward.csv", index=False)  # good, checked before overlap
    with pytest.raises(SystemExit, match="proxy_gbps"):
        mod.ingest(session, out)
    assert not (out / "forward.csv").exists()
