"""Every benchmark in one command: regenerates the README's benchmark table and the scaling plot.

    python benchmarks/run_all.py            # full (about 10 minutes on 2 cores; the 1.2M run ~2.5)
    python benchmarks/run_all.py --quick    # smaller sizes, for a look (about 3 minutes)
    python benchmarks/run_all.py --baseline COMMIT   # and the same-run speed/memory ratio against COMMIT
    python benchmarks/run_all.py --baseline COMMIT --rounds 5 --pdsim-run 1000000,10000000   # the README's

With ``--baseline``, the README table opens with ``compare.py``'s same-run ratios (current tree vs
COMMIT in a temporary worktree, interleaved and rotated, median and spread, bare SimPy in the same
rounds, CPU beside wall time, the load average): the only speed claim the table makes. The absolute
figures below it describe this machine on this day and are not compared with other days. With
``--pdsim-run``, it ends with the peak memory of the whole ``pdsim run`` pipeline at those request
counts (``run_memory.py``: the README's commands, each in its own process), checked against issue
27's bounds (1M < 1.5 GB, 10M < 12 GB). ``--pdsim-run-alongside`` runs those in the background
while the other benchmarks run (after the ``--baseline`` rounds, which run alone), so a 10M run's
half hour overlaps the rest; the table says so, and the load average of every part is recorded.

Runs, each in its own process so each peak memory is its own:
1. bench_core.py (best of 5) - requests per wall-second on one core, bare SimPy as a normaliser;
2. bench_scale.py over trace length (12k, 120k, 1.2M requests on P4D6) and over cluster size
   (1, 4, 12 copies of the P4D6 groups behind one router, the trace's rate times the copies);
3. bench_scale.py with the 12 copies as independent replicas on 1 and 2 worker processes;
4. bench_sweep.py on 1 and 2 workers (the 13-node sweep, no resume), for the pool's efficiency;
5. with ``--pdsim-run``, run_memory.py at each count.

Writes ``benchmarks/results.json`` (every figure, the date, commit, machine and the load average
at the start and end of every part; rewritten after each part, ``"partial": true`` until the end), the table
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
import threading
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
# Bare SimPy's rate varying more than this between rounds means the machine's load changed under
# the comparison: the table then says wall-time ratios are noise and points at the CPU time.
NOISY = 1.5


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


def _load() -> float:
    return os.getloadavg()[0]


def measure(quick: bool, baseline: str | None = None, rounds: int = 7,
            pdsim_runs: list[tuple[str, int]] | None = None, alongside: bool = False,
            save: Callable[[dict], None] = lambda r: None) -> dict:
    """Every figure of the table; ``save`` is called with the results so far after each part."""
    base = 12031
    sizes = [base, 10 * base] if quick else [base, 10 * base, 100 * base]
    fleets = [1, 4] if quick else [1, 4, 12]
    reps = 4 if quick else 12
    out: dict = {"date": dt.date.today().isoformat(), "commit": _commit(), "python": platform.python_version(),
                 "cores": os.cpu_count(), "machine": platform.processor() or platform.machine(), "quick": quick,
                 "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "partial": True,
                 "load_avg": {}}

    lock = threading.Lock()  # the background memory runs and the main thread both record and save

    def part(name: str, fn: Callable[[], object]) -> None:
        load0, t0 = _load(), time.perf_counter()
        value = fn()
        with lock:
            out[name] = value
            out["load_avg"][name] = {"start": load0, "end": _load(), "wall_s": time.perf_counter() - t0}
            save(out)

    if baseline:
        from compare import compare

        part("versus", lambda: compare(baseline, rounds, "dsv3-h800-p4d6"))
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []
    if pdsim_runs:
        import run_memory

        out["pdsim_run_alongside"] = alongside
        out["pdsim_run_requested"] = [list(run) for run in pdsim_runs]
        out["pdsim_run"] = []
        load0, t0 = _load(), time.perf_counter()

        def one(kind: str, n: int) -> None:
            try:
                row = run_memory.measure(kind, n)
            except BaseException as e:  # re-raised in the main thread below
                errors.append(e)
                return
            with lock:  # each run is saved as it ends, so a long one does not hold the others back
                out["pdsim_run"] = sorted([*out["pdsim_run"], row], key=lambda m: m["requests"])
                out["load_avg"]["pdsim_run"] = {"start": load0, "end": _load(), "wall_s": time.perf_counter() - t0}
                save(out)

        # alongside: every run at once in the background (each its own process); else after the rest
        threads = [threading.Thread(target=one, args=run, name=f"pdsim-run-{run[1]}") for run in pdsim_runs]
        if alongside:
            for th in threads:
                th.start()
    part("core", lambda: _json_of("bench_core.py", "--repeat", "3" if quick else "5"))
    part("length", lambda: _json_of("bench_scale.py", "--sizes", ",".join(map(str, sizes))))
    part("fleet", lambda: [_json_of("bench_scale.py", "--sizes", str(base * f), "--fleet", str(f))[0]
                           for f in fleets])
    part("replicas", lambda: [_json_of("bench_scale.py", "--sizes", str(base * reps), "--fleet", str(reps),
                                       "--replicas", "--workers", str(w), "--no-report")[0] for w in (1, 2)])
    part("sweep", lambda: [_json_of("bench_sweep.py", "--workers", str(w), "--no-resume") for w in (1, 2)])
    if pdsim_runs and not alongside:
        load0, t0 = _load(), time.perf_counter()
        for th in threads:
            th.start()
            th.join()
    if alongside and threads:
        print("waiting for the pdsim run memory measurements", flush=True)
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    with lock:
        out["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        out["partial"] = False
        save(out)
    return out


ABSOLUTE = ("core", "length", "fleet", "replicas", "sweep")


def table(r: dict) -> str:
    """The README's table from a results dict; parts a stopped run did not reach are named, not dropped."""
    lines: list[str] = []
    if r.get("versus"):
        from compare import table as versus_table

        lines += [versus_table(r["versus"]), *_versus_caveat(r["versus"]), "",
                  "Absolute figures on this machine, this day:", ""]
    missing = [k for k in ABSOLUTE if not r.get(k)]
    if "core" in missing:
        lines.append(f"Absolute figures: not measured (the run of {r['date']} at commit `{r['commit']}` was stopped "
                     f"before them{_load_text(r)}).")
    else:
        lines += _absolute_rows(r)
        if missing:
            why = r.get("stopped") or "the run was stopped before them"
            lines += ["", f"Not measured: {', '.join(missing)} ({why})."]
    if r.get("pdsim_run") or r.get("pdsim_run_requested"):
        lines += ["", *memory_table(r)]
    return "\n".join(lines)


def _absolute_rows(r: dict) -> list[str]:
    c = r["core"]
    lines = [f"Measured {r['date']} at commit `{r['commit']}` on this {r['cores']}-core machine (Python "
             f"{r['python']}) by `python benchmarks/run_all.py`; bare SimPy runs "
             f"{c['simpy_events_per_s']:,.0f} events/s here (the machine normaliser){_load_text(r)}.", "",
             "| benchmark | what | result |", "|---|---|---|",
             f"| `bench_core.py` | Mooncake conversation trace ({c['requests']:,} requests) through DeepSeek-V3 "
             f"P4D6 on H800 ({c['gpus']} GPUs), one core, best of {c['repeat']} | {c['requests_per_s']:,.0f} "
             f"requests/s, {c['steps_per_s']:,.0f} engine steps/s, {c['peak_mib']:,.0f} MiB peak |"]
    for row in r.get("length") or []:
        lines.append(f"| `bench_scale.py` | {row['requests']:,} requests (the trace tiled), P4D6, whole pipeline "
                     f"(simulate, metrics, tables, report) | {row['requests_per_s']:,.0f} requests/s simulated, "
                     f"{row['simulate_s'] + row['metrics_s'] + row.get('outputs_s', 0):,.1f} s in all, "
                     f"{row['peak_mib']:,.0f} MiB peak |")
    for row in (r.get("fleet") or [])[1:]:
        lines.append(f"| `bench_scale.py --fleet {row['fleet']}` | {row['fleet']} copies of the P4D6 groups "
                     f"({row['gpus']:,} GPUs) behind one router, {row['requests']:,} requests | "
                     f"{row['requests_per_s']:,.0f} requests/s, {row['peak_mib']:,.0f} MiB peak |")
    if r.get("replicas"):
        w1, w2 = r["replicas"]
        same = all(w1[k] == w2[k] for k in ("completed", "mean_ttft_ms", "p99_itl_ms", "engine_steps"))
        lines.append(f"| `bench_scale.py --replicas` | {w1['fleet']} independent P4D6 replicas ({w1['gpus']:,} "
                     f"GPUs), {w1['requests']:,} requests, 1 vs 2 worker processes | {w1['simulate_s']:.1f} s vs "
                     f"{w2['simulate_s']:.1f} s ({w1['simulate_s'] / w2['simulate_s']:.2f}x, "
                     f"{w1['simulate_s'] / w2['simulate_s'] / 2:.0%} efficiency); "
                     f"{'same' if same else 'DIFFERENT'} completed, mean TTFT, p99 ITL and steps |")
    if r.get("sweep"):
        s1, s2 = r["sweep"]
        lines.append(f"| `bench_sweep.py` | {s1['sweep']}: {s1['configurations']} configurations ({s1['simulated']} "
                     f"simulated), 1 vs 2 workers | {s1['wall_s']:.1f} s vs {s2['wall_s']:.1f} s "
                     f"({s1['wall_s'] / s2['wall_s']:.2f}x, {s1['wall_s'] / s2['wall_s'] / 2:.0%} efficiency) |")
    if r.get("length") and r.get("fleet"):
        lines += ["", "Scaling plot (requests and cluster size against wall time and peak memory): "
                  "[docs/benchmarks/scaling.html](docs/benchmarks/scaling.html)."]
    return lines


def _versus_caveat(v: dict) -> list[str]:
    """Say plainly when the two trees did different work, and when the machine was too busy for wall times."""
    steps, simpy = v["steps"], v["simpy_events_per_s"]
    lines = []
    if simpy["max"] > NOISY * simpy["min"]:
        lines += ["", f"Bare SimPy's rate varied {simpy['max'] / simpy['min']:.1f}x between rounds (other jobs came "
                      f"and went on the shared machine): the wall-time ratios carry that noise, the CPU-time ratio "
                      f"much less, so read speed from the CPU time here."]
    if steps["current"] == steps["baseline"]:
        return lines + ["", "Both trees took the same engine steps on the same requests: like for like."]
    return lines + ["", f"The two trees price the same requests differently (the baseline took {steps['baseline']:,} "
                        f"engine steps, the current tree {steps['current']:,}), so these ratios mix speed with "
                        f"different work."]


def _load_text(r: dict) -> str:
    loads = [x for part in r.get("load_avg", {}).values() for x in (part["start"], part["end"])]
    if not loads:
        return ""
    return f"; 1-minute load average {min(loads):.1f}-{max(loads):.1f} over the run (machine shared)"


def _gb(b: float) -> str:
    return f"{b / 2**20:,.0f} MiB ({b / 1e9:.2f} GB)"


def _minutes(s: float) -> str:
    m, sec = divmod(round(s), 60)
    return f"{m} min {sec} s" if m else f"{sec} s"


def memory_table(r: dict) -> list[str]:
    """The ``pdsim run`` memory rows, their bounds, and the commands that produced them."""
    import run_memory

    rows = r.get("pdsim_run") or []
    load = r.get("load_avg", {}).get("pdsim_run") or r.get("pdsim_run_load_avg")
    how = ("all at once in the background while the benchmarks above ran" if r.get("pdsim_run_alongside")
           else "after the benchmarks above")
    kept = r.get("pdsim_run_kept")  # rows carried from an earlier run (--keep-pdsim-run)
    if kept:
        how = (f"not in this run: measured on {kept['date']} at commit `{kept['commit']}` ({kept['file']}), "
               + kept.get("how", f"where they ran {how.replace('the benchmarks above', 'the benchmarks of that run')}"))
    lines = [f"Memory through `pdsim run` (simulate, summary, verdict facts, every output file: summary.json, "
             f"requests and timeline Parquet, report.html; verdict re-simulation off), each run its own process, "
             f"{how}; peak RSS the kernel's `ru_maxrss` for it (what `/usr/bin/time -v` prints)"
             + (f", load average {load['start']:.1f} at the start and {load['end']:.1f} at the end" if load else "")
             + ". Bounds from issue 27: 1M requests under 1.5 GB, 10M under 12 GB.", "",
             "| requests | workload | engine steps | peak RSS | per request | bound | wall (simulate) | CPU |",
             "|---|---|---|---|---|---|---|---|"]
    for m in rows:
        bound = ("-" if m["bound_bytes"] is None else
                 f"{'under' if m['within_bound'] else 'OVER'} {m['bound_bytes'] / 1e9:g} GB")
        lines.append(f"| {m['requests']:,} | {m['workload']} | {m['engine_steps'] / 1e6:.1f}M | {_gb(m['peak_bytes'])} "
                     f"| {m['bytes_per_request']:,.0f} B | {bound} | {_minutes(m['wall_s'])} "
                     f"({_minutes(m['simulate_s'])}) | {_minutes(m['cpu_s'])} |")
    done = [f"{m['requests']:,} ({m['workload']}): {m['completed']:,} completed, {m['dropped']:,} dropped, "
            f"{m['sim_time_s']:,.0f} s simulated" for m in rows]
    measured = {(m["workload"], m["requests"]) for m in rows}
    missing = [f"{n:,} ({k})" for k, n in r.get("pdsim_run_requested", []) if (k, n) not in measured]
    if missing:
        done.append(f"not measured (the run did not finish): {', '.join(missing)}")
    lines += ["", "; ".join(done) + ".", ""]
    runs = [(m["workload"], m["requests"]) for m in rows]
    runs += [(k, n) for k, n in r.get("pdsim_run_requested", []) if (k, n) not in runs]
    for k in sorted({k for k, _ in runs}):
        rate, mean, _ = run_memory.WORKLOADS[k]
        lines.append(f"Workload {k}: P4D6 (`{run_memory.SCENARIO}`, 80 H800 GPUs), synthetic, log-normal prompts "
                     f"(mean {mean:,} tokens) and outputs (mean 340) at {rate:g} requests/s.")
    for k, n in runs:
        lines += ["", f"{n:,} requests, workload {k}:", "",
                  *("    " + line for line in run_memory.command_text(k, n).splitlines())]
    return lines


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


def _kept_rows(path: Path) -> dict:
    """The ``pdsim run`` rows of an earlier results file, with where they come from."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"--keep-pdsim-run {path}: cannot read a results file ({e})")
    if not isinstance(old, dict) or not old.get("pdsim_run"):
        raise SystemExit(f"--keep-pdsim-run {path}: no 'pdsim_run' rows in it")
    src = old.get("pdsim_run_kept") or {"date": old.get("date", "?"), "commit": old.get("commit", "?"),
                                         "file": f"`run_all.py` results in {path}"}
    out = {k: old[k] for k in ("pdsim_run", "pdsim_run_requested", "pdsim_run_alongside") if k in old}
    out["pdsim_run_kept"] = src
    if "pdsim_run" in old.get("load_avg", {}):
        out["pdsim_run_load_avg"] = old["load_avg"]["pdsim_run"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a look, not the README's figures)")
    ap.add_argument("--from-json", help="rewrite the table and plot from a results file, without measuring")
    ap.add_argument("--baseline", help="also measure the same-run ratio against this commit (benchmarks/compare.py)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds of the --baseline comparison")
    ap.add_argument("--pdsim-run", metavar="COUNTS",
                    help="also the peak memory of the whole `pdsim run` at these request counts, e.g. "
                         "1000000,10000000 (WORKLOAD:COUNT picks workload A or B; a bare count takes A below 5M, "
                         "B from 5M on, as the README's rows); skip it for a quick run")
    ap.add_argument("--pdsim-run-alongside", action="store_true",
                    help="run the --pdsim-run measurements in the background beside the other benchmarks")
    ap.add_argument("--keep-pdsim-run", metavar="RESULTS_JSON",
                    help="carry the `pdsim run` memory rows of an earlier results file into this one, labelled with "
                         "their date and commit (the 10M run takes an hour; the README then says they were not "
                         "re-measured)")
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit("--rounds: must be >= 1")
    if args.keep_pdsim_run and args.pdsim_run:
        raise SystemExit("--keep-pdsim-run: give it or --pdsim-run, not both")
    kept = _kept_rows(Path(args.keep_pdsim_run)) if args.keep_pdsim_run else None
    if args.from_json:
        r = json.loads(Path(args.from_json).read_text())
    else:
        import run_memory

        runs = run_memory.parse_runs(args.pdsim_run) if args.pdsim_run else None
        path = HERE / ("results-quick.json" if args.quick else "results.json")
        r = measure(args.quick, args.baseline, args.rounds, runs, args.pdsim_run_alongside,
                    save=lambda res: path.write_text(json.dumps({**res, **(kept or {})}, indent=2) + "\n"))
    if kept:
        r.update(kept)
    if r.get("quick"):
        print(table(r))
        return
    write_readme(table(r))
    if r.get("length") and r.get("fleet"):
        plot(r, ROOT / "docs" / "benchmarks" / "scaling.html")
    print(table(r))


if __name__ == "__main__":
    main()
