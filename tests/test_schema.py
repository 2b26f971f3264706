"""Spec help for users: the JSON Schema of scenario and sweep YAML (generated from the spec
dataclasses, committed under docs/schema and refreshed by one command), and the hints that
name pdsim's field for vLLM's / SGLang's / bench tools' knob names."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

import pdsim
from pdsim.cli import main
from pdsim.cli.schema_cmd import DOCUMENTS, document, dumps, write_all
from pdsim.specs.errors import SpecError

from builders import REPO, resolve, scenario_dict

SCHEMA_DIR = REPO / "docs" / "schema"
SCENARIOS = sorted((REPO / "workloads" / "scenarios").glob("*.yaml"))
SWEEPS = sorted((REPO / "workloads" / "sweeps").glob("*.yaml"))


# ---- a validator: jsonschema where installed, else a minimal structural check ---------------
def _mini_errors(schema: dict, value, root: dict, path: str = "") -> list[str]:
    """The keywords pdsim's generator emits: $ref, anyOf, type, enum, properties, required,
    additionalProperties, items, prefixItems, propertyNames."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        errs = _mini_errors(root["$defs"][name], value, root, path)
        rest = {k: v for k, v in schema.items() if k not in ("$ref", "$defs", "$schema", "title", "description")}
        return errs + (_mini_errors(rest, value, root, path) if rest else [])
    if "anyOf" in schema:
        if not any(not _mini_errors(s, value, root, path) for s in schema["anyOf"]):
            return [f"{path}: matches no alternative"]
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    t = schema.get("type")
    if t == "integer" and not (isinstance(value, int) and not isinstance(value, bool)
                               or isinstance(value, float) and value.is_integer()):
        return [f"{path}: not an integer"]
    if t == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return [f"{path}: not a number"]
    if t in types and not isinstance(value, types[t]):
        return [f"{path}: not {t}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{path}: {value!r} not in enum"]
    errs: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for k in schema.get("required", ()):
            if k not in value:
                errs.append(f"{path}.{k}: required")
        names = schema.get("propertyNames", {}).get("enum")
        for k, v in value.items():
            if names is not None and k not in names:
                errs.append(f"{path}.{k}: name not allowed")
            if k in props:
                errs += _mini_errors(props[k], v, root, f"{path}.{k}")
            elif schema.get("additionalProperties") is False:
                errs.append(f"{path}.{k}: additional property")
            elif isinstance(schema.get("additionalProperties"), dict):
                errs += _mini_errors(schema["additionalProperties"], v, root, f"{path}.{k}")
    if isinstance(value, list):
        if "prefixItems" in schema:
            for i, (s, v) in enumerate(zip(schema["prefixItems"], value)):
                errs += _mini_errors(s, v, root, f"{path}[{i}]")
        elif "items" in schema:
            for i, v in enumerate(value):
                errs += _mini_errors(schema["items"], v, root, f"{path}[{i}]")
    return errs


def schema_errors(schema: dict, value) -> list[str]:
    try:
        import jsonschema
    except ImportError:  # not a pdsim dependency: fall back to the structural check above
        return _mini_errors(schema, value, schema)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in jsonschema.Draft202012Validator(schema).iter_errors(value)]


@pytest.fixture(scope="module")
def schemas() -> dict:
    return {name: json.loads((SCHEMA_DIR / f"{name}.json").read_text()) for name in DOCUMENTS}


def test_committed_schemas_are_current(tmp_path):
    """`pdsim schema all --out docs/schema` regenerates exactly the committed files."""
    assert main(["schema", "all", "--out", str(tmp_path)]) == 0
    for name in DOCUMENTS:
        fresh = (tmp_path / f"{name}.json").read_text()
        assert fresh == (SCHEMA_DIR / f"{name}.json").read_text(), (
            f"docs/schema/{name}.json is stale: run `pdsim schema all --out docs/schema`")


def test_schemas_are_valid_draft_2020_12(schemas):
    jsonschema = pytest.importorskip("jsonschema")
    for schema in schemas.values():
        jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_bundled_scenario_validates(path, schemas):
    assert schema_errors(schemas["scenario"], yaml.safe_load(path.read_text())) == []


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_every_bundled_sweep_validates(path, schemas):
    assert schema_errors(schemas["sweep"], yaml.safe_load(path.read_text())) == []


def _mutations():
    """(description, mutate) pairs that pdsim rejects as structural errors."""
    def at(path, value):
        def f(d):
            node = d
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = value
        return f
    return [
        ("unknown top-level field", at(["hardwar"], "h100")),
        ("unknown engine knob", at(["cluster", "prefill", 0, "engine", "max_num_seqs"], 8)),
        ("string for an integer", at(["cluster", "prefill", 0, "count"], "two")),
        ("bad literal", at(["cluster", "prefill", 0, "engine", "deepep_mode"], "fast")),
        ("list for a mapping", at(["slo"], [1, 2])),
        ("unknown SLO term", at(["slo", "p99_ttft_ms"], 5)),
        ("unknown workload field", at(["workload", "request_rate"], 3)),
    ]


@pytest.mark.parametrize("what, mutate", _mutations(), ids=[m[0] for m in _mutations()])
def test_schema_and_pdsim_reject_the_same_structural_errors(what, mutate, schemas):
    d = scenario_dict()
    assert schema_errors(schemas["scenario"], d) == []
    resolve(d)
    bad = copy.deepcopy(d)
    mutate(bad)
    assert schema_errors(schemas["scenario"], bad), what
    with pytest.raises(SpecError):
        resolve(bad)


def test_cluster_role_as_single_mapping_is_valid(schemas):
    d = scenario_dict()
    d["cluster"]["decode"] = d["cluster"]["decode"][0]  # `decode: {count: 1, ...}` as pdsim accepts
    assert schema_errors(schemas["scenario"], d) == []
    resolve(d)


def test_descriptions_come_from_comments_and_docstrings(schemas):
    defs = schemas["scenario"]["$defs"]
    assert "KV page" in defs["EngineSpec"]["properties"]["page_size"]["description"]
    # a comment continued on the next line
    assert "-1 disables chunking" in defs["EngineSpec"]["properties"]["chunked_prefill_size"]["description"]
    # a docstring bullet
    assert "worst" in defs["SLOSpec"]["properties"]["max_itl_ms"]["description"]
    assert "h800" in defs["Scenario"]["properties"]["hardware"]["examples"]
    sweep = schemas["sweep"]["$defs"]
    assert "output_throughput_per_gpu" in sweep["ObjectiveSpec"]["properties"]["metric"]["enum"]


def test_schema_command_prints_and_writes(tmp_path, capsys):
    assert main(["schema", "sweep"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "pdsim sweep"
    out = tmp_path / "s.json"
    assert main(["schema", "scenario", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == document("scenario")
    assert main(["schema", "all"]) == 2  # a folder is needed
    assert "--out" in capsys.readouterr().err


def test_write_all_matches_dumps(tmp_path):
    paths = write_all(tmp_path)
    assert [p.name for p in paths] == [f"{n}.json" for n in DOCUMENTS]
    assert paths[0].read_text() == dumps(document("scenario"))


# ---- knob-name hints -----------------------------------------------------------------------
@pytest.mark.parametrize("where, key, expect", [
    (["cluster", "decode", 0, "engine"], "max_num_seqs", "vLLM's `max_num_seqs` is `max_running_requests`"),
    (["cluster", "decode", 0, "engine"], "max_num_batched_tokens", "is `chunked_prefill_size`"),
    (["cluster", "decode", 0, "engine"], "block_size", "vLLM's `block_size` is `page_size`"),
    (["cluster", "decode", 0, "engine"], "gpu_memory_utilization", "is `mem_fraction_static`"),
    (["cluster", "decode", 0, "engine"], "enable_prefix_caching", "inverted"),
    (["cluster", "decode", 0], "tensor_parallel_size", "vLLM's `tensor_parallel_size` is `tp`"),
    (["cluster", "decode", 0], "tp_size", "is `tp`"),
    (["cluster", "decode", 0], "max_running_requests", "an engine knob: put it under the group's engine:"),
    (["cluster", "decode", 0, "engine"], "dp", "a group field"),
    (["cluster", "decode", 0, "engine"], "max-running-requests", "pdsim spells it `max_running_requests`"),
    (["transfer"], "kv_connector", "is `backend`"),
    (["slo"], "e2el", "is `e2e_ms`"),
    (["workload"], "request_rate", "bench_serving's `request_rate` is `rate`"),
])
def test_foreign_knob_names_get_a_hint(where, key, expect):
    d = scenario_dict(transfer={"backend": "mooncake"})
    node = d
    for k in where:
        node = node[k]
    node[key] = 1
    with pytest.raises(SpecError) as err:
        resolve(d)
    msg = str(err.value)
    assert "unknown field" in msg and expect in msg
    assert "expected one of" in msg  # the valid keys are still listed


def test_hint_through_set_names_set(tmp_path):
    with pytest.raises(SpecError) as err:
        pdsim.load_scenario("llama8b-a800-colocated", ["cluster.colocated.engine.max_num_seqs=8"])
    assert err.value.source == "--set" and "max_running_requests" in str(err.value)


def test_typos_still_get_did_you_mean():
    d = scenario_dict()
    d["cluster"]["decode"][0]["engine"]["max_runing_requests"] = 4
    with pytest.raises(SpecError, match="did you mean 'max_running_requests'"):
        resolve(d)


def test_hf_config_names_in_a_model_yaml(tmp_path):
    model = yaml.safe_load((REPO / "workloads" / "models" / "llama-3.1-8b.yaml").read_text())
    model["num_hidden_layers"] = model.pop("num_layers")
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(model))
    with pytest.raises(SpecError, match="Hugging Face's `num_hidden_layers` is `num_layers`"):
        resolve(scenario_dict(model=str(p)))


def test_schema_path_is_in_repo():
    assert Path(SCHEMA_DIR / "scenario.json").exists() and Path(SCHEMA_DIR / "sweep.json").exists()
