"""pdsim launch: every knob maps to a flag or says why not; the commands of the bundled
scenarios carry the expected flags and parse against the flag tables checked from SGLang
0.5.3, sglang-router and vLLM 0.11.0 (pdsim/launch/flags.py); the scripts are valid shell."""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess

import pytest
import yaml

import pdsim
from pdsim.cli import main
from pdsim.launch import launch_plan as plan
from pdsim.launch import sglang as sg
from pdsim.launch import vllm as vl
from pdsim.launch.flags import SGLANG_ROUTER, SGLANG_SERVER, VLLM_KV_TRANSFER_KEYS, VLLM_P2P_EXTRA, VLLM_SERVE, check_args
from pdsim.launch.script import commands_of, render, render_per_node
from pdsim.specs.catalog import scenario_keys
from pdsim.specs.errors import SpecError
from pdsim.specs.scenario import EngineSpec, GroupSpec, RouterSpec, TransferSpec

from builders import REPO, resolve, scenario_dict

SGLANG_OK = [k for k in scenario_keys() if k not in ("cpu-vllm-tiny-llama", "cpu-vllm-tiny-llama-1p1d",
                                                     "cpu-sglang-tiny-llama", "llama8b-a800-1p1d")]
VLLM_OK = ["cpu-vllm-tiny-llama", "llama8b-a800-1p1d", "llama8b-a800-colocated", "dsv3-h800-colocated-2node"]


def _knob_names() -> set[str]:
    names = {f"group.{f.name}" for f in dataclasses.fields(GroupSpec)}
    names |= {f"engine.{f.name}" for f in dataclasses.fields(EngineSpec)}
    names |= {f"transfer.{f.name}" for f in dataclasses.fields(TransferSpec)}
    names |= {f"router.{f.name}" for f in dataclasses.fields(RouterSpec)}
    # the scenario's deployment-level blocks; the rest (workload, slo, seed, cost model, ...) are
    # what to simulate, not how to serve
    return names | {"kv_offload", "overheads", "faults", "autoscaler", "experts", "network"}


@pytest.mark.parametrize("module", [sg, vl], ids=["sglang", "vllm"])
def test_every_knob_maps_or_says_why_not(module):
    assert set(module.KNOBS) == _knob_names()
    for knob, flag in module.KNOBS.items():
        if flag is None:
            assert module.WHY_NOT.get(knob), f"{knob}: no launch equivalent and no reason given"


def _split(lp):
    """(server option lists by role, router option lists) of a plan."""
    servers, routers = {}, []
    for c in lp.commands:
        argv = list(c.argv)
        if argv[:3] == ["python", "-m", "sglang.launch_server"] or argv[:2] == ["vllm", "serve"]:
            role = "prefill" if "prefill" in c.comment else "decode" if "decode" in c.comment else "colocated"
            servers.setdefault(role, []).append(c.options)
        elif argv[:3] == ["python", "-m", "sglang_router.launch_router"]:
            routers.append(c.options)
    return servers, routers


def _value(opts: list[str], flag: str) -> str:
    return opts[opts.index(flag) + 1]


@pytest.mark.parametrize("key", SGLANG_OK)
def test_sglang_commands_parse_against_the_flag_tables(key):
    lp = plan(pdsim.load_scenario(key), "sglang")
    servers, routers = _split(lp)
    for opts in [o for v in servers.values() for o in v]:
        assert check_args(SGLANG_SERVER, opts) == []
    for opts in routers:
        assert check_args(SGLANG_ROUTER, opts) == []


@pytest.mark.parametrize("key", VLLM_OK)
def test_vllm_commands_parse_against_the_flag_tables(key):
    lp = plan(pdsim.load_scenario(key), "vllm")
    servers, _ = _split(lp)
    assert servers
    for opts in [o for v in servers.values() for o in v]:
        assert check_args(VLLM_SERVE, opts) == []


def test_p4d6_expected_flags():
    lp = plan(pdsim.load_scenario("dsv3-h800-p4d6"), "sglang")
    assert lp.nodes == 10
    servers, [router] = _split(lp)
    pre, dec = servers["prefill"], servers["decode"]
    assert len(pre) == 4 and len(dec) == 6  # one process per node
    for opts in pre:
        for flag, value in (("--disaggregation-mode", "prefill"), ("--tp-size", "16"), ("--dp-size", "16"),
                            ("--ep-size", "16"), ("--moe-a2a-backend", "deepep"), ("--deepep-mode", "normal"),
                            ("--chunked-prefill-size", "131072"), ("--max-prefill-tokens", "16384"),
                            ("--page-size", "64"), ("--mem-fraction-static", "0.85"), ("--nnodes", "2"),
                            ("--disaggregation-transfer-backend", "mooncake")):
            assert _value(opts, flag) == value, flag
        assert "--enable-dp-attention" in opts and "--cuda-graph-max-bs" not in opts  # prefill runs eager
    assert sorted(_value(o, "--node-rank") for o in pre) == ["0", "0", "1", "1"]
    assert {_value(o, "--disaggregation-bootstrap-port") for o in pre} == {"8998", "8999"}
    for opts in dec:
        for flag, value in (("--disaggregation-mode", "decode"), ("--tp-size", "48"), ("--dp-size", "48"),
                            ("--ep-size", "48"), ("--deepep-mode", "low_latency"), ("--ep-num-redundant-experts", "32"),
                            ("--max-running-requests", "12288"), ("--cuda-graph-max-bs", "256"), ("--nnodes", "6"),
                            ("--mem-fraction-static", "0.835")):
            assert _value(opts, flag) == value, flag
        assert "--enable-eplb" not in opts and "--init-expert-location" in opts  # static placement on decode
        assert "--chunked-prefill-size" not in opts and "--max-prefill-tokens" not in opts  # prefill-only
    assert sorted(_value(o, "--node-rank") for o in dec) == [str(i) for i in range(6)]
    # every process of an instance meets at its first node
    assert len({_value(o, "--dist-init-addr") for o in dec}) == 1
    assert router.count("--prefill") == 2 and router.count("--decode") == 1
    assert "--pd-disaggregation" in router and _value(router, "--policy") == "round_robin"


def test_dp_attention_reserve_is_sglangs_default():
    """pdsim applies SGLang's x0.3 under DP attention itself, so the default reserve needs no
    --schedule-conservativeness; a changed ratio is written as ratio / 0.7 on any server."""
    lp = plan(pdsim.load_scenario("dsv3-h800-p4d9"), "sglang")
    servers, _ = _split(lp)
    assert all("--schedule-conservativeness" not in o for v in servers.values() for o in v)
    lp = plan(pdsim.load_scenario("dsv3-h800-p4d9", ["cluster.decode.engine.init_new_token_ratio=0.35"]), "sglang")
    servers, _ = _split(lp)
    assert float(_value(servers["decode"][0], "--schedule-conservativeness")) == pytest.approx(0.5)
    lp = plan(pdsim.load_scenario("llama8b-a800-colocated"), "sglang")
    servers, routers = _split(lp)
    [opts] = servers["colocated"]
    assert "--schedule-conservativeness" not in opts and "--enable-mixed-chunk" in opts and not routers


def test_sub_node_instances_share_a_node():
    d = scenario_dict()
    d["cluster"]["prefill"][0]["count"] = 2
    lp = plan(resolve(d), "sglang")
    assert lp.nodes == 1
    servers, [router] = _split(lp)
    gpu_ids = sorted(_value(o, "--base-gpu-id") for v in servers.values() for o in v)
    ports = {_value(o, "--port") for v in servers.values() for o in v}
    assert gpu_ids == ["0", "1", "2"] and len(ports) == 3


def test_router_policies():
    d = scenario_dict(router={"policy": "cache_aware"})
    _, [router] = _split(plan(resolve(d), "sglang"))
    assert _value(router, "--prefill-policy") == "cache_aware" and _value(router, "--decode-policy") == "power_of_two"
    d = scenario_dict("colocated", router={"policy": "least_loaded"})
    d["cluster"]["colocated"][0]["count"] = 3
    _, [router] = _split(plan(resolve(d), "sglang"))
    assert _value(router, "--policy") == "power_of_two" and router.count("--worker-urls") == 1


def test_published_routers_and_priority_scheduling():
    d = scenario_dict(router={"policy": "sglang_cache_aware", "params": {"cache_threshold": 0.5}})
    d["cluster"]["decode"][0]["engine"]["schedule_policy"] = "priority-low-first"
    lp = plan(resolve(d), "sglang")
    servers, [router] = _split(lp)
    assert _value(router, "--policy") == "cache_aware" and _value(router, "--cache-threshold") == "0.5"
    assert _value(router, "--max-tree-size") == "67108864"  # the router's default, in characters
    assert check_args(SGLANG_ROUTER, router) == []
    [dec] = servers["decode"]
    assert "--enable-priority-scheduling" in dec and "--schedule-low-priority-values-first" in dec
    _, [router] = _split(plan(resolve(scenario_dict(router={"policy": "vllm_xpyd"})), "sglang"))
    assert _value(router, "--policy") == "round_robin"
    lp = plan(resolve(scenario_dict(router={"policy": "dynamo_kv"})), "sglang")
    assert "Dynamo" in dict(lp.unmapped)["router.policy"]
    d = scenario_dict(transfer={"backend": "nccl"}, router={"policy": "vllm_xpyd"})
    d["cluster"]["decode"][0]["engine"]["schedule_policy"] = "priority-low-first"
    lp = plan(resolve(d), "vllm")
    servers, _ = _split(lp)
    assert _value(servers["decode"][0], "--scheduling-policy") == "priority" and "router.policy" not in dict(lp.unmapped)


@pytest.mark.parametrize("mode, send", [("put", "PUT"), ("put_async", "PUT_ASYNC"), ("get", "GET")])
def test_vllm_p2p_nccl_kv_transfer_config(mode, send):
    d = scenario_dict(transfer={"backend": "nccl", "mode": mode, "kv_buffer_fraction": 0.05, "host_pool_gib": 16})
    resolved = resolve(d)
    servers, _ = _split(plan(resolved, "vllm"))
    hbm = resolved.hardware.gpu.hbm_bytes
    for role, kv_role in (("prefill", "kv_producer"), ("decode", "kv_consumer")):
        [opts] = servers[role]
        cfg = json.loads(_value(opts, "--kv-transfer-config"))
        assert set(cfg) == set(VLLM_KV_TRANSFER_KEYS)
        assert cfg["kv_connector"] == "P2pNcclConnector" and cfg["kv_role"] == kv_role
        extra = cfg["kv_connector_extra_config"]
        assert set(extra) <= set(VLLM_P2P_EXTRA)
        assert extra["send_type"] == send and extra["http_port"] == _value(opts, "--port")
        assert extra["mem_pool_size_gb"] == "16" and extra["proxy_port"] == "30001"
        buffer = float(cfg["kv_buffer_size"])
        if role == "decode" or mode == "get":  # the receive buffer (GET: P holds KV until D pulls)
            assert buffer == pytest.approx(0.05 * hbm, rel=1e-2)
        else:
            assert buffer < 1e3
        assert _value(opts, "--block-size") == "16"


def test_engine_and_transport_must_match():
    with pytest.raises(SpecError, match="--engine vllm"):
        plan(pdsim.load_scenario("llama8b-a800-1p1d"), "sglang")
    with pytest.raises(SpecError, match="--engine sglang"):
        plan(pdsim.load_scenario("dsv3-h800-p4d9"), "vllm")


def test_unmapped_knobs_are_listed():
    d = scenario_dict(transfer={"backend": "mooncake", "nic_gbit": 100, "batched": False})
    d["cluster"]["decode"][0]["engine"].update(schedule_policy="spf", max_retractions_per_request=4)
    lp = plan(resolve(d), "sglang")
    unmapped = dict(lp.unmapped)
    assert "transfer.nic_gbit" in unmapped and "transfer.batched" in unmapped
    assert "cluster.decode[0].engine.schedule_policy" in unmapped
    assert "cluster.decode[0].engine.max_retractions_per_request" in unmapped
    assert "no launch equivalent" in render(lp)
    lp = plan(pdsim.load_scenario("dsr1-h20-offload-dram"), "sglang")
    assert "kv_offload" in dict(lp.unmapped)


@pytest.mark.parametrize("key, engine", [("dsv3-h800-p4d6", "sglang"), ("dsv3-h800-p3x3d4", "sglang"),
                                         ("llama8b-a800-1p1d", "vllm"), ("cpu-vllm-tiny-llama", "vllm")])
def test_scripts_are_valid_shell_and_round_trip(key, engine):
    lp = plan(pdsim.load_scenario(key), engine)
    text = render(lp)
    if shutil.which("bash"):
        proc = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
        assert proc.returncode == 0, proc.stderr
    launched = [list(c.argv) for n in range(lp.nodes) for c in lp.on_node(n)] + [list(c.argv) for c in lp.router]
    assert commands_of(text) == launched
    for name, body in render_per_node(lp).items():
        assert commands_of(body), name


def test_script_refuses_to_run_without_node_addresses(tmp_path):
    if not shutil.which("bash"):
        pytest.skip("no bash")
    p = tmp_path / "launch.sh"
    p.write_text(render(plan(pdsim.load_scenario("dsv3-h800-p4d9"), "sglang")))
    proc = subprocess.run(["bash", str(p), "0"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode != 0 and "NODE_0" in proc.stderr


def test_vllm_multi_node_dp_ranks_ray_and_cpu_kv_space():
    dp = pdsim.load_scenario("dsv3-h800-colocated-2node",
                             ["cluster.colocated.dp=16", "cluster.colocated.enable_dp_attention=true"])
    servers, _ = _split(plan(dp, "vllm"))
    first, second = servers["colocated"]
    assert "--headless" not in first and "--headless" in second
    assert _value(first, "--data-parallel-size") == "16" and _value(first, "--tensor-parallel-size") == "1"
    assert _value(second, "--data-parallel-start-rank") == _value(first, "--data-parallel-size-local") == "8"
    assert dict(plan(dp, "vllm").commands[0].env)["VLLM_ALL2ALL_BACKEND"] == "deepep_low_latency"
    tp = plan(pdsim.load_scenario("dsv3-h800-colocated-2node"), "vllm")  # TP16 over two nodes: Ray
    assert [c.argv[:2] for c in tp.commands] == [("ray", "start"), ("ray", "start"), ("vllm", "serve")]
    assert _value(list(tp.commands[2].argv), "--distributed-executor-backend") == "ray"
    lp = plan(pdsim.load_scenario("cpu-vllm-tiny-llama"), "vllm")
    [cmd] = [c for c in lp.commands if c.argv[:2] == ("vllm", "serve")]
    assert dict(cmd.env)["VLLM_CPU_KVCACHE_SPACE"] == "1"  # 524,288 tokens of 2 KiB: the scenario's 1 GiB
    assert "--enforce-eager" in cmd.argv and _value(list(cmd.argv), "--max-num-seqs") == "32"


def test_cli_writes_scripts_and_reports_unmapped(tmp_path, capsys):
    out = tmp_path / "l"
    assert main(["launch", "dsr1-h20-offload-dram", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "wrote" in text and "kv_offload" in text
    assert (out / "launch.sh").read_text().startswith("#!/usr/bin/env bash")
    assert main(["launch", "dsv3-h800-p4d9", "--out", str(out / "p"), "--per-node"]) == 0
    assert {p.name for p in (out / "p").iterdir()} == {f"node{i}.sh" for i in range(13)} | {"router.sh"}
    assert main(["launch", "llama8b-a800-1p1d"]) == 2  # nccl has no SGLang form
    assert "--engine vllm" in capsys.readouterr().err
    assert main(["launch", "dsv3-h800-p4d9", "--per-node"]) == 2


def test_cli_launches_a_sweeps_best_configuration(tmp_path, capsys):
    from pdsim.explore.sweep import run_sweep

    sweep = {"name": "t", "base": str(REPO / "workloads" / "scenarios" / "llama8b-a800-colocated.yaml"),
             "set": {"workload.num_requests": 40},
             "axes": [{"field": "cluster.colocated.engine.max_running_requests", "values": [8, 64]}]}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    out = tmp_path / "out"
    run_sweep(path, out, workers=1, progress=False)
    summary = json.loads((out / "summary.json").read_text())
    label, best = next(iter(summary["best"].items()))
    assert main(["launch", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"best for {label}" in text and "sglang.launch_server" in text
    cid = best["config_id"]
    assert main(["launch", str(out), "--config", cid]) == 0
    assert main(["launch", str(out), "--config", "nope"]) == 2
    assert main(["launch", str(out), "--objective", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown objective" in err and "no configuration 'nope'" in err
