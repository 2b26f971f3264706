"""``pdsim launch TARGET``: the SGLang (or vLLM) commands that start a simulated deployment.

TARGET is a scenario (YAML path or bundled key, with ``--set`` overrides) or a sweep output
folder, whose best configuration (``--objective``, default the sweep's first) or a chosen
``--config`` is launched.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("launch", help="write the SGLang / vLLM server and router commands of a scenario",
                       description="Write the launch commands (SGLang servers + router, or vLLM servers + proxy) "
                                   "for every instance of a scenario or of a sweep's chosen configuration, with "
                                   "the knobs pdsim simulated.")
    p.add_argument("target", help="scenario YAML path or bundled key, or a sweep output folder (with summary.json "
                                  "and configs/)")
    p.add_argument("--set", action="append", metavar="FIELD=VALUE",
                   help="override a scenario field before writing the commands (as for pdsim run)")
    p.add_argument("--engine", choices=["sglang", "vllm"], default="sglang",
                   help="which engine's commands: sglang (Mooncake P/D, default) or vllm (P2P NCCL xPyD)")
    p.add_argument("--engine-version", metavar="X.Y.Z",
                   help="the engine release to write flags for: SGLang 0.4.7-0.4.9 (--enable-deepep-moe, mini_lb "
                        "router) or 0.5.0-0.5.3 (default 0.5.3); vLLM 0.10.0-0.10.2 or 0.11.0 (default)")
    p.add_argument("--ib-devices", metavar="LIST",
                   help="each node's RDMA devices, e.g. mlx5_0,mlx5_1 (written as --disaggregation-ib-device and "
                        "NCCL_IB_HCA)")
    p.add_argument("--config", metavar="ID", help="sweep folder: launch this configuration id (configs/ID.yaml)")
    p.add_argument("--objective", metavar="LABEL",
                   help="sweep folder: launch the best configuration for this objective of its summary.json, "
                        "by its label or its metric (default: the first objective listed there); ties within "
                        "0.1%% go to the fewest GPUs, then the lowest p90 TTFT")
    p.add_argument("--model-path", metavar="PATH",
                   help="model weights to serve (a Hugging Face id or a local folder); default: the bundled "
                        "model's Hugging Face id, else ${MODEL_PATH}")
    p.add_argument("--out", metavar="DIR",
                   help="write launch.sh (or one script per node with --per-node) here instead of printing")
    p.add_argument("--per-node", action="store_true",
                   help="with --out: one script per node (node<i>.sh) and router.sh instead of one launch.sh")
    from .run_cmd import add_allow_plugin

    add_allow_plugin(p)
    p.set_defaults(fn=run)


def _fmt(v) -> str:
    return f"{v:,.4g}" if isinstance(v, float) else str(v)


def _sweep_config(folder: Path, config: str | None, objective: str | None) -> tuple[Path, str, dict]:
    """(configuration YAML, how it was chosen, its summary entry or {}) from a sweep output folder."""
    from ..specs.errors import SpecError

    summary_path = folder / "summary.json"
    if config:
        path = folder / "configs" / f"{config}.yaml"
        if not path.exists():
            have = sorted(p.stem for p in (folder / "configs").glob("*.yaml"))[:10]
            raise SpecError(f"no configuration {config!r} in this sweep (e.g. {', '.join(have) or 'none'})",
                            source=str(folder), field="--config")
        return path, f"configuration {config}", _row_of(folder, config)
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError) as err:
        raise SpecError(f"not a finished sweep folder: cannot read summary.json ({err})", source=str(folder)) from None
    best = summary.get("best") or {}
    if not best:
        raise SpecError("the sweep names no best configuration (none met its SLO): choose one with --config",
                        source=str(summary_path))
    label = objective or next(iter(best))
    if label not in best:
        by_metric = [k for k, e in best.items() if e.get("metric") == label]
        if not by_metric:
            raise SpecError(f"unknown objective {label!r}; this sweep's are: {', '.join(best)} (or a metric: "
                            f"{', '.join(dict.fromkeys(e.get('metric', '') for e in best.values()))})",
                            source=str(summary_path), field="--objective")
        label = by_metric[0]
    entry = best[label]
    how = f"best for {label}: configuration {entry['config_id']} ({_fmt(entry.get('value'))})"
    if (entry.get("tied") or 1) > 1:
        how += f"; {entry['tied']} configurations tie within 0.1%, chosen by {entry.get('tie_break')}"
    return folder / entry["config"], how, entry


def _row_of(folder: Path, config_id: str) -> dict:
    """The layout and knobs of one configuration from the sweep's results.csv ({} if absent)."""
    import csv

    try:
        with open(folder / "results.csv", newline="") as fh:
            for row in csv.DictReader(fh):
                if row.get("config_id") == config_id:
                    return {"layout": row.get("layout"), "config_id": config_id}
    except OSError:
        pass
    return {}


def _named(lp, entry: dict, folder: Path):
    """The plan named by its configuration's layout, not the sweep base's name."""
    import dataclasses

    if not entry.get("layout"):
        return lp
    knobs = ", ".join(f"{k}={_fmt(v)}" for k, v in (entry.get("knobs") or {}).items())
    desc = f"configuration {entry['config_id']} of the sweep in {folder.name}, base {lp.scenario}" + \
        (f"; {knobs}" if knobs else "")
    return dataclasses.replace(lp, scenario=f"{entry['layout']} ({lp.model})", description=desc)


def run(args: argparse.Namespace) -> int:
    from .. import api
    from ..launch import launch_plan
    from ..launch.script import render, render_per_node
    from ..specs.errors import SpecError
    from .run_cmd import trust_from

    target = Path(args.target)
    chosen, entry = "", {}
    if target.is_dir():
        path, chosen, entry = _sweep_config(target, args.config, args.objective)
        target_ref = str(path)
    else:
        if args.config or args.objective:
            raise SpecError("--config and --objective choose from a sweep output folder", field="--config")
        target_ref = args.target
    resolved = api.load_scenario(target_ref, args.set or [], trust=trust_from(args))
    lp = launch_plan(resolved, args.engine, args.model_path, args.engine_version, args.ib_devices)
    if entry:
        lp = _named(lp, entry, target)
    if args.per_node and not args.out:
        raise SpecError("--per-node writes files: give --out DIR", field="--per-node")
    if not args.out:
        if chosen:
            print(f"# {chosen}")
        sys.stdout.write(render(lp))
        return 0
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        files = render_per_node(lp) if args.per_node else {"launch.sh": render(lp)}
        for name, text in files.items():
            (out / name).write_text(text)
            (out / name).chmod(0o755)
    except OSError as err:
        raise SpecError(f"cannot write the launch scripts: {err.strerror or err}", source=str(out)) from None
    print(f"pdsim launch: {lp.scenario} ({lp.versions}), {lp.nodes} node(s)" + (f"; {chosen}" if chosen else ""))
    print(f"  wrote {out}/: " + ", ".join(files))
    if lp.unmapped:
        print("  no launch equivalent for:")
        for k, why in lp.unmapped:
            print(f"    {k}: {why}")
    return 0
