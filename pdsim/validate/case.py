"""Validation cases: a folder with ``case.yaml`` naming a real result, a scenario and tolerances.

    name: cpu-vllm-light                 # defaults to the folder name
    description: one line
    source: {what: ..., provenance: ..., licence: ...}
    real: real/bench.json                # any file pdsim.ingest reads, relative to the folder
    format: auto                         # its format (default: detected)
    scenario: scenario.yaml              # relative path, or a bundled scenario key
    arrivals: auto                       # auto | send_times | closed_loop
    tolerances: {mean_ttft_ms: 0.2, ...} # gated metrics -> relative tolerance
    set: [hardware=PATH, ...]            # overrides of the scenario (FIELD=VALUE, as --set)
    after: [hardware=PATH, ...]          # overrides on top of ``set`` describing the host as re-measured
                                         # just after the recording: simulated beside, never the verdict
    host: zen1                           # the machine it was recorded on (a label): cases of one host
                                         # with the same requests are repeats (repeats.py)
    steps: [TRACE[@LOAD], ...]           # the engine's own step traces of this run (validate/traced_steps.py
                                         # formats; {trace: ..., group: decode} for a P/D group's): how the
                                         # profile prices them is a note beside the verdicts, never one
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..specs._convert import read_yaml
from ..specs.errors import SpecError
from .compare import DEFAULT_TOLERANCES, Row, compare, number

CASE_FILE = "case.yaml"
KEYS = {"name", "description", "source", "real", "format", "scenario", "arrivals", "tolerances", "max_concurrency",
        "set", "after", "host", "steps"}


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
    profile: str = ""  # the hardware profile simulated: the scenario's, or a `hardware=` override
    step_speed: float = 0.0  # the step-speed band the rows were drawn at (step_speed.py), 0: none
    requests_of: Any = None  # its requests (repeats.Requests): which other cases are repeats of it
    repeats: list[str] = field(default_factory=list)  # names of the cases recorded with the same requests

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
    if not isinstance(data.get("host", ""), str):
        raise SpecError("expected a label naming the machine the run was recorded on (e.g. zen1)", source=str(f),
                        field="host")
    for key in ("set", "after"):
        v = data.get(key)
        if v is not None and not (isinstance(v, list) and all(isinstance(o, str) and "=" in o for o in v)):
            raise SpecError("expected a list of FIELD=VALUE overrides (e.g. - hardware=PATH)", source=str(f), field=key)
    steps = data.get("steps") or []
    if not isinstance(steps, list) or not all(
            isinstance(x, str) or (isinstance(x, dict) and isinstance(x.get("trace"), str)
                                   and isinstance(x.get("group", ""), str) and set(x) <= {"trace", "group"})
            for x in steps):
        raise SpecError("expected a list of step traces: TRACE[@LOAD], or {trace: TRACE[@LOAD], group: ROLE[.INDEX]}",
                        source=str(f), field="steps")
    data["steps"] = [x if isinstance(x, dict) else {"trace": x} for x in steps]
    data.setdefault("name", folder.name)
    return data


def _step_notes(folder: Path, sc, steps: list[dict]) -> list[str]:
    """How the case's profile prices the engine's own steps of this run (traced_steps.priced_note)."""
    from .traced_steps import priced_note

    out = []
    for i, s in enumerate(steps):
        try:
            out.append(priced_note(sc, str(folder / s["trace"]), s.get("group")))
        except SpecError as err:
            raise SpecError(str(err), source=str(folder / CASE_FILE), field=f"steps[{i}]") from None
    return out


def run_case(folder: str | Path, html_path: str | Path | None = None, plotlyjs: str | bool = "cdn",
             overrides: list[str] | None = None, step_speed: float = 0.0) -> CaseResult:
    """Validate one case folder; write its HTML report to ``html_path`` when given. ``overrides``
    (``FIELD=VALUE``, as ``--set``) apply after the case's own ``set`` (e.g. a re-measured profile:
    ``hardware=PATH``). ``step_speed`` (a fraction, 0.05 = 5%): also simulate the run with every
    step that much faster and slower (step_speed.py); 0: not."""
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
    sc = api.load_scenario(sc_path, list(c.get("set") or []) + list(overrides or []))
    from ..specs.machine import warn_if_elsewhere

    warn_if_elsewhere(sc)  # the case's profile measured on another machine: say so (once per profile)
    al = simulate_aligned(ing.record, sc, c.get("arrivals", "auto"), c.get("max_concurrency"))
    try:
        rows, extras = compare(al.real, al.sim, c["tolerances"], al.pairs)
    except ValueError as err:
        raise SpecError(str(err), source=str(folder / CASE_FILE), field="tolerances") from None
    if step_speed:
        from .step_speed import with_step_band

        rows = with_step_band(rows, ing.record, sc, step_speed, c.get("arrivals", "auto"), c.get("max_concurrency"))
    after_note = ""
    if c.get("after"):
        if any(o.startswith("hardware=") for o in overrides or []):
            after_note = "the profile re-measured after the recording not simulated: --set gives every case's profile"
        else:
            from dataclasses import replace

            sc_after = api.load_scenario(sc_path, list(c.get("set") or []) + list(c["after"]) + list(overrides or []))
            s_after = simulate_aligned(ing.record, sc_after, c.get("arrivals", "auto"), c.get("max_concurrency")).sim
            after = s_after.summary()
            rows = [replace(r, after=number(after.get(r.metric))) for r in rows]
            after_note = ("also simulated with the host as re-measured just after the recording (case.yaml after: "
                          + ", ".join(c["after"]) + "); the verdicts are the profile's measured before it")
    from .engine_counts import cache_note, one_engine

    cache = cache_note(ing.record.meta, al.sim.requests, int(al.real.requests["finished"].sum()),
                       one_engine(sc.scenario.cluster))
    notes = [f"real run format: {ing.format}"] + list(ing.notes) + [al.prefix_note] + (
        [cache] if cache else []) + ([al.host_note] if al.host_note else []) + ([after_note] if after_note else [])
    notes += _step_notes(folder, sc, c["steps"])
    if overrides:
        notes.append("scenario overridden: " + ", ".join(overrides))
    if html_path is not None:
        validation_html(al, rows, extras, str(html_path), f"pdsim validation: {c['name']}", notes, plotlyjs,
                        step_speed)
    hw_set = [o.split("=", 1)[1] for o in list(c.get("set") or []) + list(overrides or []) if o.startswith("hardware=")]
    profile = hw_set[-1] if hw_set else sc.hardware.name
    notes.append(f"hardware profile: {profile}")
    from .repeats import Requests

    deployment = (str(Path(sc_path).resolve()) if Path(sc_path).is_file() else str(sc_path),
                  tuple(sorted(o for o in c.get("set") or [] if o.startswith("cluster."))))
    return CaseResult(c["name"], c.get("description", ""), rows, extras, notes, len(al.pairs), al.arrivals,
                      c.get("source") or {}, profile, step_speed,
                      Requests.of(al.table, al.arrivals, c.get("host", ""), deployment))


def find_cases(root: str | Path) -> list[Path]:
    root = Path(root)
    if not root.is_dir():
        raise SpecError("not a folder of validation cases", source=str(root))
    cases = sorted(p.parent for p in root.glob(f"*/{CASE_FILE}"))
    if not cases:
        raise SpecError(f"no case folders (each with a {CASE_FILE}) here", source=str(root))
    return cases


GATED = {"mean_ttft_ms": 0.2, "p90_ttft_ms": 0.2, "mean_itl_ms": 0.2, "p90_itl_ms": 0.2}


def write_case(record, folder: str | Path, *, name: str, description: str, what: str, provenance: str,
               scenario: str, licence: str = "generated by this project (Apache-2.0)",
               tolerances: dict[str, float] | None = None) -> dict:
    """A validation case folder from a real run's record (``pdsim replay``): ``real/bench.json``
    (every token; the per-request tables are left out to keep the folder small),
    ``real/summary.json`` and ``case.yaml`` (source, scenario path relative to the folder, send
    times as arrivals, tolerances; default GATED). Returns the run's summary."""
    import warnings

    import yaml

    from ..metrics.results import Results
    from ..report.outputs import write_run_outputs

    folder = Path(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a real run has no per-phase timestamps
        res = Results(record)
        write_run_outputs(res, folder / "real", "csv", report=False, bench_json=True)
        summary = res.summary()
    for f in ("requests.csv", "timeline.csv"):
        (folder / "real" / f).unlink(missing_ok=True)
    doc = {"name": name, "description": description,
           "source": {"what": what, "provenance": provenance, "licence": licence},
           "real": "real/bench.json", "scenario": scenario, "arrivals": "send_times",
           "tolerances": dict(tolerances or GATED)}
    (folder / "case.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, width=110))
    return summary
