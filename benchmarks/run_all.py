"""Every benchmark in one command: regenerates the README's benchmark table and the scaling plot.

    python benchmarks/run_all.py            # full (about 10 minutes on 2 cores; the 1.2M run ~2.5)
    python benchmarks/run_all.py --quick    # smaller sizes, for a look (about 3 minutes)
    python benchmarks/run_all.py --baseline COMMIT   # and the same-run speed/memory ratio against COMMIT

With ``--baseline``, the README table opens with ``compare.py``'s same-run ratios (current tree vs
COMMIT in a temporary worktree, interleaved and rotated, median and spread, bare SimPy in the same
rounds, CPU beside wall time, the load average): the only speed claim the table makes. The absolute
figures below it describe this machine on this day and are not compared with other days.

Runs, each in its own process so each peak memory is its own:
1. bench_core.py (best of 5) - requests per wall-second on one core, bare SimPy as a normaliser;
2. bench_scale.py over trace length (12k, 120k, 1.2M requests on P4D6) and over cluster size
   (1, 4, 12 copies of the P4D6 groups behind one router, the trace's rate times the copies);
3. bench_scale.py with the 12 copies as independent replicas on 1 and 2 worker processes;
4. bench_sweep.py on 1 and 2 workers (the 13-node sweep, no resume), for the pool's efficiency.

Writes ``benchmarks/results.json`` (every figure, the date, commit and machine), the table
between the ``<!-- bench:begin -->`` / ``<!-- bench:end -->`` markers of README.md, and
``docs/benchmarks/scaling.html`` (requests and cluster size against wall time and peak memory).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def _json_of(script: str, *args: str) -> object:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "out.json"
        cmd = [sys.executable, str(HERE / script), *args, "--json", str(out)]
        print("$", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
        return json.loads(out.read_text())


def _commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=ROOT).stdout.strip()
        return sha + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def measure(quick: bool, baseline: str | None = None, rounds: int = 7) -> dict:
    base = 12031
    sizes = [base, 10 * base] if quick else [base, 10 * base, 100 * base]
    fleets = [1, 4] if quick else [1, 4, 12]
    reps = 4 if quick else 12
    out: dict = {"date": dt.date.today().isoformat(), "commit": _commit(), "python": platform.python_version(),
                 "cores": os.cpu_count(), "machine": platform.processor() or platform.machine(), "quick": quick}
    if baseline:
        from compare import compare

        out["versus"] = compare(baseline, rounds, "dsv3-h800-p4d6")
    out["core"] = _json_of("bench_core.py", "--repeat", "3" if quick else "5")
    out["length"] = _json_of("bench_scale.py", "--sizes", ",".join(map(str, sizes)))
    out["fleet"] = [_json_of("bench_scale.py", "--sizes", str(base * f), "--fleet", str(f))[0] for f in fleets]
    out["replicas"] = [_json_of("bench_scale.py", "--sizes", str(base * reps), "--fleet", str(reps), "--replicas",
                                "--workers", str(w), "--no-report")[0] for w in (1, 2)]
    out["sweep"] = [_json_of("bench_sweep.py", "--workers", str(w), "--no-resume") for w in (1, 2)]
    return out


def table(r: dict) -> str:
    c = r["core"]
    versus = []
    if r.get("versus"):
        from compare import table as versus_table

        versus = [versus_table(r["versus"]), "", "Absolute figures on this machine, this day:", ""]
    lines = versus + [f"Measured {r['date']} at commit `{r['commit']}` on this {r['cores']}-core machine (Python "
             f"{r['python']}) by `python benchmarks/run_all.py`; bare SimPy runs "
             f"{c['simpy_events_per_s']:,.0f} events/s here (the machine normaliser).", "",
             "| benchmark | what | result |", "|---|---|---|",
             f"| `bench_core.py` | Mooncake conversation trace ({c['requests']:,} requests) through DeepSeek-V3 "
             f"P4D6 on H800 ({c['gpus']} GPUs), one core, best of {c['repeat']} | {c['requests_per_s']:,.0f} "
             f"requests/s, {c['steps_per_s']:,.0f} engine steps/s, {c['peak_mib']:,.0f} MiB peak |"]
    for row in r["length"]:
        lines.append(f"| `bench_scale.py` | {row['requests']:,} requests (the trace tiled), P4D6, whole pipeline "
                     f"(simulate, metrics, tables, report) | {row['requests_per_s']:,.0f} requests/s simulated, "
                     f"{row['simulate_s'] + row['metrics_s'] + row.get('outputs_s', 0):,.1f} s in all, "
                     f"{row['peak_mib']:,.0f} MiB peak |")
    for row in r["fleet"][1:]:
        lines.append(f"| `bench_scale.py --fleet {row['fleet']}` | {row['fleet']} copies of the P4D6 groups "
                     f"({row['gpus']:,} GPUs) behind one router, {row['requests']:,} requests | "
                     f"{row['requests_per_s']:,.0f} requests/s, {row['peak_mib']:,.0f} MiB peak |")
    w1, w2 = r["replicas"]
    same = all(w1[k] == w2[k] for k in ("completed", "mean_ttft_ms", "p99_itl_ms", "engine_steps"))
    lines.append(f"| `bench_scale.py --replicas` | {w1['fleet']} independent P4D6 replicas ({w1['gpus']:,} GPUs), "
                 f"{w1['requests']:,} requests, 1 vs 2 worker processes | {w1['simulate_s']:.1f} s vs "
                 f"{w2['simulate_s']:.1f} s ({w1['simulate_s'] / w2['simulate_s']:.2f}x, "
                 f"{w1['simulate_s'] / w2['simulate_s'] / 2:.0%} efficiency); "
                 f"{'same' if same else 'DIFFERENT'} completed, mean TTFT, p99 ITL and steps |")
    s1, s2 = r["sweep"]
    lines.append(f"| `bench_sweep.py` | {s1['sweep']}: {s1['configurations']} configurations ({s1['simulated']} "
                 f"simulated), 1 vs 2 workers | {s1['wall_s']:.1f} s vs {s2['wall_s']:.1f} s "
                 f"({s1['wall_s'] / s2['wall_s']:.2f}x, {s1['wall_s'] / s2['wall_s'] / 2:.0%} efficiency) |")
    lines += ["", "Scaling plot (requests and cluster size against wall time and peak memory): "
              "[docs/benchmarks/scaling.html](docs/benchmarks/scaling.html)."]
    return "\n".join(lines)


def plot(r: dict, path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("trace length (P4D6, 80 GPUs)",
                                                        "cluster size (requests grow with the GPUs)"),
                        specs=[[{"secondary_y": True}, {"secondary_y": True}]])
    for col, rows, x, xt in ((1, r["length"], "requests", "requests"), (2, r["fleet"], "gpus", "GPUs")):
        xs = [row[x] for row in rows]
        fig.add_trace(go.Scatter(x=xs, y=[row["simulate_s"] + row["metrics_s"] + row.get("outputs_s", 0)
                                          for row in rows], name=f"wall s ({xt})", mode="lines+markers"),
                      row=1, col=col, secondary_y=False)
        fig.add_trace(go.Scatter(x=xs, y=[row["peak_mib"] for row in rows], name=f"peak MiB ({xt})",
                                 mode="lines+markers", line={"dash": "dot"}), row=1, col=col, secondary_y=True)
        fig.update_xaxes(type="log", title_text=xt, row=1, col=col)
        fig.update_yaxes(type="log", title_text="wall time (s)", row=1, col=col, secondary_y=False)
        fig.update_yaxes(type="log", title_text="peak memory (MiB)", row=1, col=col, secondary_y=True)
    fig.update_layout(title=f"pdsim scaling, {r['date']} at {r['commit']}", height=480, width=1100)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(path, include_plotlyjs="cdn")


def write_readme(md: str) -> None:
    readme = ROOT / "README.md"
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"README.md has no {BEGIN} ... {END} markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(head + BEGIN + "\n" + md + "\n" + END + tail)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a look, not the README's figures)")
    ap.add_argument("--from-json", help="rewrite the table and plot from a results file, without measuring")
    ap.add_argument("--baseline", help="also measure the same-run ratio against this commit (benchmarks/compare.py)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds of the --baseline comparison")
    args = ap.parse_args()
    if args.from_json:
        r = json.loads(Path(args.from_json).read_text())
    else:
        r = measure(args.quick, args.baseline, args.rounds)
        (HERE / ("results-quick.json" if args.quick else "results.json")).write_text(json.dumps(r, indent=2) + "\n")
    if r.get("quick"):
        print(table(r))
        return
    write_readme(table(r))
    plot(r, ROOT / "docs" / "benchmarks" / "scaling.html")
    print(table(r))


if __name__ == "__main__":
    main()
