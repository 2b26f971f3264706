"""Validation cases: a folder with ``case.yaml`` naming a real result, a scenario and tolerances.

    name: cpu-vllm-light                 # defaults to the folder name
    description: one line
    source: {what: ..., provenance: ..., licence: ...}
    real: real/bench.json                # any file pdsim.ingest reads, relative to the folder
    format: auto                         # its format (default: detected)
    scenario: scenario.yaml              # relative path, or a bundled scenario key
    arrivals: auto                       # auto | send_times | closed_loop
    tolerances: {mean_ttft_ms: 0.2, ...} # gated metrics -> relative tolerance
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..specs._convert import read_yaml
from ..specs.errors import SpecError
from .compare import DEFAULT_TOLERANCES, Row, compare

CASE_FILE = "case.yaml"
KEYS = {"name", "description", "source", "real", "format", "scenario", "arrivals", "tolerances", "max_concurrency",
        "set"}


@dataclass
class CaseResult:
    name: str
    description: str
    rows: list[Row]
    extras: dict
    notes: list[str]
    requests: int
    arrivals: str
    source: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not any(r.verdict == "FAIL" for r in self.rows)


def load_case(folder: Path) -> dict:
    f = folder / CASE_FILE
    data = read_yaml(f)
    if not isinstance(data, dict):
        raise SpecError("expected a mapping (name, real, scenario, tolerances, ...)", source=str(f))
    extra = set(data) - KEYS
    if extra:
        raise SpecError(f"unknown key(s) {', '.join(sorted(extra))}; expected {', '.join(sorted(KEYS))}", source=str(f))
    for k in ("real", "scenario"):
        if not isinstance(data.get(k), str):
            raise SpecError("missing (a path relative to the case folder)", source=str(f), field=k)
    tol = data.get("tolerances", DEFAULT_TOLERANCES)
    if not isinstance(tol, dict) or not all(isinstance(v, (int, float)) and v > 0 for v in tol.values()):
        raise SpecError("expected a mapping of metric -> relative tolerance > 0 (e.g. mean_ttft_ms: 0.2)",
                        source=str(f), field="tolerances")
    data["tolerances"] = {str(k): float(v) for k, v in tol.items()}
    data.setdefault("name", folder.name)
    return data


def run_case(folder: str | Path, html_path: str | Path | None = None, plotlyjs: str | bool = "cdn") -> CaseResult:
    """Validate one case folder; write its HTML report to ``html_path`` when given."""
    from .. import api
    from ..ingest import read_run
    from .align import simulate_aligned
    from .report import validation_html

    folder = Path(folder)
    c = load_case(folder)
    real_path = folder / c["real"]
    ing = read_run(real_path, c.get("format", "auto"))
    sc_ref = c["scenario"]
    sc_path = folder / sc_ref if (folder / sc_ref).is_file() else sc_ref
    sc = api.load_scenario(sc_path, c.get("set") or [])
    al = simulate_aligned(ing.record, sc, c.get("arrivals", "auto"), c.get("max_concurrency"))
    try:
        rows, extras = compare(al.real, al.sim, c["tolerances"], al.pairs)
    except ValueError as err:
        raise SpecError(str(err), source=str(folder / CASE_FILE), field="tolerances") from None
    notes = [f"real run format: {ing.format}"] + list(ing.notes)
    if html_path is not None:
        validation_html(al, rows, extras, str(html_path), f"pdsim validation: {c['name']}", notes, plotlyjs)
    return CaseResult(c["name"], c.get("description", ""), rows, extras, notes, len(al.pairs), al.arrivals,
                      c.get("source") or {})


def find_cases(root: str | Path) -> list[Path]:
    root = Path(root)
    if not root.is_dir():
        raise SpecError("not a folder of validation cases", source=str(root))
    cases = sorted(p.parent for p in root.glob(f"*/{CASE_FILE}"))
    if not cases:
        raise SpecError(f"no case folders (each with a {CASE_FILE}) here", source=str(root))
    return cases
