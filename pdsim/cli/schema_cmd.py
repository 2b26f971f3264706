"""``pdsim schema scenario|sweep|all``: JSON Schema of scenario and sweep YAML for editors.

The documents are generated from the spec dataclasses (pdsim/specs/schema.py) with the
bundled hardware, model and storage keys and the plug-in registries' keys as suggestions.
``pdsim schema all --out docs/schema`` refreshes the committed copies.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DOCUMENTS = ("scenario", "sweep")


def register(sub) -> None:
    p = sub.add_parser("schema", help="JSON Schema of scenario and sweep YAML (editor completion and validation)",
                       description="Print or write the JSON Schema of pdsim's scenario or sweep YAML, generated "
                                   "from the spec dataclasses.")
    p.add_argument("document", choices=[*DOCUMENTS, "all"],
                   help="which schema: scenario, sweep, or all (all needs --out, a folder)")
    p.add_argument("--out", metavar="PATH",
                   help="write to this file (for all: this folder, one <document>.json each) instead of printing")
    p.set_defaults(fn=run)


def scenario_document() -> dict:
    from ..sim.control.router import ROUTERS
    from ..sim.engine.scheduler import SCHEDULERS
    from ..sim.kv.tiers import EVICTION
    from ..sim.transports import TRANSPORTS
    from ..specs.schema import bundled_examples, scenario_schema

    examples = bundled_examples()
    examples[("RouterSpec", "policy")] = ROUTERS.keys()
    examples[("TransferSpec", "backend")] = TRANSPORTS.keys()
    examples[("EngineSpec", "schedule_policy")] = SCHEDULERS.keys()
    examples[("OffloadSpec", "eviction")] = EVICTION.keys()
    examples[("Scenario", "cost_model")] = ["auto", "roofline", "calibrated"]
    return scenario_schema(examples)


def sweep_document() -> dict:
    from ..explore.spec import LATENCIES, OBJECTIVE_METRICS, SweepSpec
    from ..specs.catalog import scenario_keys
    from ..specs.schema import SchemaBuilder

    extra = {("ObjectiveSpec", "metric"): {"enum": list(OBJECTIVE_METRICS)},
             ("HeatmapSpec", "metric"): {"anyOf": [{"enum": list(OBJECTIVE_METRICS)}, {"type": "null"}]},
             ("SearchSpec", "limits"): {"propertyNames": {"enum": list(LATENCIES)}}}
    builder = SchemaBuilder({("SweepSpec", "base"): scenario_keys()}, extra)
    return builder.document(SweepSpec, "pdsim sweep",
                            "A pdsim sweep: a base scenario, axes of scenario field paths, fixed overrides, "
                            "constraints, SLO, search mode and objectives.")


def document(name: str) -> dict:
    return {"scenario": scenario_document, "sweep": sweep_document}[name]()


def dumps(doc: dict) -> str:
    """The committed form: two-space indents, key order as generated, newline at the end."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def write_all(folder: str | Path) -> list[Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in DOCUMENTS:
        path = folder / f"{name}.json"
        path.write_text(dumps(document(name)), encoding="utf-8")
        paths.append(path)
    return paths


def run(args: argparse.Namespace) -> int:
    from ..specs.errors import SpecError

    if args.document == "all":
        if not args.out:
            raise SpecError("`pdsim schema all` writes one file per document: give --out FOLDER", field="--out")
        try:
            paths = write_all(args.out)
        except OSError as err:
            raise SpecError(f"cannot write the schema files: {err.strerror or err}", source=args.out) from None
        print("wrote " + ", ".join(str(p) for p in paths))
        return 0
    text = dumps(document(args.document))
    if not args.out:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.out).write_text(text, encoding="utf-8")
    except OSError as err:
        raise SpecError(f"cannot write the schema: {err.strerror or err}", source=args.out) from None
    print(f"wrote {args.out}")
    return 0
