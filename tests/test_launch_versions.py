"""pdsim launch --engine-version: each release range writes only the flags that range accepts
(launch/versions.py), and the bundled DeepSeek P/D scenarios come out as the SGLang team's
large-scale EP recipe for that release.

The recipe (SGLang 0.4.8, the seed's deployment; the same flags as sgl-project/sglang issue
#6017 and https://lmsys.org/blog/2025-05-05-large-scale-ep/): prefill and decode both run
``--tp/--dp --enable-dp-attention --enable-deepep-moe --deepep-mode --moe-dense-tp-size 1
--enable-dp-lm-head --page-size --disable-radix-cache --enable-two-batch-overlap
--mem-fraction-static --max-running-requests --disaggregation-ib-device --disaggregation-mode``;
prefill adds ``--chunked-prefill-size --max-prefill-tokens --max-total-tokens`` and online EPLB
(``--enable-eplb --eplb-algorithm deepseek --ep-dispatch-algorithm dynamic
--eplb-rebalance-num-iterations 500 --ep-num-redundant-experts 32``); decode adds
``--cuda-graph-bs`` and a static placement (``--ep-num-redundant-experts 32
--init-expert-location FILE``). Environment: ``SGL_ENABLE_JIT_DEEPGEMM=1``, decode
``SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=256``, ``NCCL_IB_HCA``.
"""
from __future__ import annotations

import json

import pytest

import pdsim
from pdsim.cli import main
from pdsim.launch import launch_plan as plan
from pdsim.launch.flags import check_args
from pdsim.launch.versions import RELEASES, parse_version, release
from pdsim.specs.catalog import scenario_keys
from pdsim.specs.errors import SpecError


COMMON = {"--tp-size", "--dp-size", "--enable-dp-attention", "DEEPEP", "--deepep-mode", "--moe-dense-tp-size",
          "--enable-dp-lm-head", "--page-size", "--disable-radix-cache", "--enable-two-batch-overlap",
          "--mem-fraction-static", "--max-running-requests", "--disaggregation-ib-device", "--disaggregation-mode",
          "--nnodes", "--node-rank", "--dist-init-addr"}
RECIPE = {
    "prefill": COMMON | {"--chunked-prefill-size", "--max-prefill-tokens", "--max-total-tokens", "--enable-eplb",
                         "--eplb-algorithm", "--ep-dispatch-algorithm", "--eplb-rebalance-num-iterations",
                         "--ep-num-redundant-experts"},
    "decode": COMMON | {"--cuda-graph-max-bs", "--ep-num-redundant-experts", "--init-expert-location"},
}
# flags pdsim writes that the recipe leaves implicit: the EP size (= tp there), the transfer
# backend (Mooncake, the recipe's default) and each prefill server's own bootstrap port
PDSIM_EXTRA = {"--ep-size", "--disaggregation-transfer-backend", "--disaggregation-bootstrap-port"}
HEAD = {"--model-path", "--trust-remote-code", "--host", "--port"}
DEEPEP = {"0.4.8": ["--enable-deepep-moe"], "0.5.3": ["--moe-a2a-backend"]}
# the scenario knobs the recipe sets that P4D9 leaves at pdsim's defaults
RECIPE_SET = ["cluster.prefill.engine.disable_radix_cache=true", "cluster.decode.engine.disable_radix_cache=true",
              "cluster.prefill.engine.enable_two_batch_overlap=true", "cluster.decode.engine.enable_two_batch_overlap=true",
              "cluster.prefill.engine.max_total_tokens=131072", "cluster.prefill.engine.ep_num_redundant_experts=32",
              "cluster.prefill.engine.max_running_requests=8192"]


def _servers(lp):
    out = {}
    for c in lp.commands:
        if c.argv[:3] == ("python", "-m", "sglang.launch_server"):
            out.setdefault("prefill" if "(prefill)" in c.comment else "decode", []).append(c)
    return out


def test_parse_version_and_unknown_ranges():
    assert parse_version("v0.4.8.post1") == (0, 4, 8) and parse_version("0.11") == (0, 11, 0)
    assert release("sglang", "0.4.9").checked == "0.4.8" and release("vllm", "0.10.2").checked == "0.10.1"
    with pytest.raises(SpecError, match="no flag table for sglang 0.4.6"):
        release("sglang", "0.4.6")
    with pytest.raises(SpecError, match="not a version"):
        release("vllm", "latest")


@pytest.mark.parametrize("version", ["0.4.8", "0.5.3"])
@pytest.mark.parametrize("key", ["dsv3-h800-p4d9", "dsv3-h800-p4d6"])
def test_deepseek_pd_matches_the_recipe(key, version):
    lp = plan(pdsim.load_scenario(key, RECIPE_SET), "sglang", version=version, ib_devices="mlx5_0,mlx5_3")
    rel = release("sglang", version)
    for role, cmds in _servers(lp).items():
        for c in cmds:
            opts = c.options
            assert check_args(rel.server, opts) == [], (role, version)
            names = {o for o in opts if o.startswith("--")} - HEAD - PDSIM_EXTRA
            want = {n for n in RECIPE[role] if n != "DEEPEP"} | set(DEEPEP[version])
            assert names == want, (role, names ^ want)
            assert opts[opts.index("--moe-dense-tp-size") + 1] == "1"
            env = dict(c.env)
            assert env["SGL_ENABLE_JIT_DEEPGEMM"] == "1" and env["NCCL_IB_HCA"] == "mlx5_0,mlx5_3"
            if role == "decode":
                assert env["SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "256"  # cuda graph bs 256
            else:
                assert opts[opts.index("--eplb-algorithm") + 1] == "deepseek"
                assert "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK" not in env
    [router] = lp.router
    if version == "0.4.8":
        assert router.argv[:3] == ("python", "-m", "sglang.srt.disaggregation.mini_lb")
        assert check_args(rel.router, router.options) == []
        assert "--prefill-bootstrap-ports" in router.options
    else:
        assert router.argv[2] == "sglang_router.launch_router" and "--pd-disaggregation" in router.argv


@pytest.mark.parametrize("rel", [r for r in RELEASES if r.engine == "sglang"], ids=lambda r: r.checked)
def test_every_bundled_scenario_parses_for_each_sglang_release(rel):
    for key in scenario_keys():
        try:
            lp = plan(pdsim.load_scenario(key), "sglang", version=rel.checked)
        except SpecError:
            continue  # a vLLM-only scenario (P2P NCCL, CPU)
        for c in lp.commands:
            table = rel.server if c.argv[2] == "sglang.launch_server" else (
                rel.router if c.argv[2] == "sglang.srt.disaggregation.mini_lb" else None)
            if table is not None:
                assert check_args(table, c.options) == [], (key, c.comment)
            for k, _v in c.env:
                assert k in rel.env or k == "CUDA_VISIBLE_DEVICES", k


@pytest.mark.parametrize("version", ["0.10.1", "0.11.0"])
def test_vllm_release_flags(version):
    rel = release("vllm", version)
    resolved = pdsim.load_scenario("dsv3-h800-colocated-2node", [
        "cluster.colocated.dp=16", "cluster.colocated.enable_dp_attention=true", "cluster.colocated.ep=16",
        "cluster.colocated.engine.ep_num_redundant_experts=16", "cluster.colocated.engine.enable_two_batch_overlap=true",
        "cluster.colocated.engine.max_total_tokens=65536"])
    lp = plan(resolved, "vllm", version=version)
    c = [c for c in lp.commands if c.argv[:2] == ("vllm", "serve")][0]
    assert check_args(rel.server, c.options) == []
    unmapped = dict(lp.unmapped)
    if version == "0.10.1":
        assert "--num-redundant-experts" in c.options and "--eplb-config" not in c.options
        assert "cluster.colocated[0].engine.enable_two_batch_overlap" in unmapped
        assert "cluster.colocated[0].engine.max_total_tokens" in unmapped
    else:
        assert "--eplb-config" in c.options and "--enable-dbo" in c.options and "--kv-cache-memory-bytes" in c.options
    assert "0.10" in lp.versions if version == "0.10.1" else "0.11.0" in lp.versions


def test_vllm_1p1d_is_the_tuned_deployment():
    """The bundled 1P1D gives the consumer ~10% of HBM as its receive buffer and lowers its
    --gpu-memory-utilization by as much; nccl_num_channels is written; the proxy's quart
    prerequisite is said."""
    resolved = pdsim.load_scenario("llama8b-a800-1p1d")
    lp = plan(resolved, "vllm")
    dec = [c for c in lp.commands if "(decode)" in c.comment][0].options
    pre = [c for c in lp.commands if "(prefill)" in c.comment][0].options
    cfg = json.loads(dec[dec.index("--kv-transfer-config") + 1])
    assert float(cfg["kv_buffer_size"]) == pytest.approx(0.1 * resolved.hardware.gpu.hbm_bytes, rel=1e-2)
    assert cfg["kv_connector_extra_config"]["nccl_num_channels"] == "16"
    assert float(dec[dec.index("--gpu-memory-utilization") + 1]) == pytest.approx(0.78)
    assert float(pre[pre.index("--gpu-memory-utilization") + 1]) == pytest.approx(0.88)
    assert any("quart" in n for n in lp.notes)
    get = plan(pdsim.load_scenario("llama8b-a800-1p1d", ["transfer.mode=get", "transfer.kv_buffer_fraction=0"]), "vllm")
    assert any("send_type GET" in n for n in get.notes)


def test_cli_engine_version_and_ib_devices(capsys):
    assert main(["launch", "dsv3-h800-p4d9", "--engine-version", "0.4.8", "--ib-devices", "mlx5_0"]) == 0
    text = capsys.readouterr().out
    assert "--enable-deepep-moe" in text and "--moe-a2a-backend" not in text and "mini_lb" in text
    assert "NCCL_IB_HCA=mlx5_0" in text and "SGLang 0.4.7-0.4.9" in text
    assert main(["launch", "dsv3-h800-p4d9", "--engine-version", "0.3.0"]) == 2
    assert "0.4.7-0.4.9" in capsys.readouterr().err


def test_sweep_pick_breaks_ties_by_gpus_then_p90_ttft():
    import pandas as pd

    from pdsim.explore.select import pick

    df = pd.DataFrame({"request_goodput": [36.2489, 36.2490, 36.25, 30.0], "gpus": [104, 96, 96, 8],
                       "p90_ttft_ms": [400.0, 600.0, 500.0, 100.0]}, index=[10, 11, 12, 13])
    idx, tied = pick(df, "request_goodput", "max")
    assert (idx, tied) == (12, 3)  # 96 GPUs, then the lower p90 TTFT
    assert pick(df, "p90_ttft_ms", "min") == (13, 1)


def test_launch_from_a_sweep_names_the_layout_and_rounds(tmp_path, capsys):
    import yaml

    from pdsim.explore.sweep import run_sweep

    from builders import REPO

    sweep = {"name": "t", "base": str(REPO / "workloads" / "scenarios" / "llama8b-a800-colocated.yaml"),
             "set": {"workload.num_requests": 30, "workload.rate": 1},
             "axes": [{"field": "cluster.colocated.count", "values": [1, 2]}]}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    out = tmp_path / "out"
    run_sweep(path, out, workers=1, progress=False)
    summary = json.loads((out / "summary.json").read_text())
    label, best = next(iter(summary["best"].items()))
    assert main(["launch", str(out), "--objective", best["metric"]]) == 0
    text = capsys.readouterr().out
    header = [ln for ln in text.splitlines() if ln.startswith("# pdsim launch:")][0]
    assert best["layout"] in header and "llama8b-a800-colocated" not in header.split("(")[0]
    chosen = text.splitlines()[0]
    value = chosen.split("(")[-1].split(")")[0]
    assert len(value.replace(",", "").replace(".", "")) <= 5, chosen  # 4 significant digits
    if best["tied"] > 1:
        assert "fewest GPUs" in chosen and best["gpus"] == 1


def test_readme_python_api_example_works_from_any_directory(tmp_path):
    """The README's API example names a bundled key, so it loads outside the repository."""
    import re
    import subprocess
    import sys

    from builders import REPO

    text = (REPO / "README.md").read_text()
    block = re.search(r"## Python API\n\n```python\n(.*?)```", text, re.S).group(1)
    load = "\n".join(ln for ln in block.splitlines() if "simulate" not in ln and "summary" not in ln)
    code = load + "\nprint(sc.name, sc.scenario.workload.trace.time_scale)\n"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["dsv3-h800-p4d6", "0.5"]


def _server_cmds(lp):
    return [c for c in lp.commands if "launch_server" in " ".join(c.argv) or c.argv[:2] == ["vllm", "serve"]]


@pytest.mark.parametrize("version, flag", [("0.5.3", True), ("0.4.8", False)])
def test_kernel_backend_knobs_select_their_kernels(version, flag):
    # engine.moe_runner / engine.moe_a2a_backend (costs: docs/mechanisms/kernel-backends.md) become the
    # switches that select those kernels: SGLang 0.5 --moe-runner-backend (MoeRunnerBackend in server_args),
    # 0.4 only SGL_ENABLE_JIT_DEEPGEMM; a2a none drops the DeepEP switches; vLLM by environment
    sets = ["cluster.prefill[0].engine.moe_runner=triton", "cluster.decode[0].engine.moe_runner=triton",
            "cluster.prefill[0].engine.moe_a2a_backend=none", "cluster.decode[0].engine.moe_a2a_backend=none"]
    lp = plan(pdsim.load_scenario("dsv3-h800-p4d9", sets), "sglang", version=version)
    for c in _server_cmds(lp):
        opts, env = list(c.options), dict(c.env)
        assert ("--moe-runner-backend" in opts) is flag
        if flag:
            assert opts[opts.index("--moe-runner-backend") + 1] == "triton"
        assert env.get("SGL_ENABLE_JIT_DEEPGEMM") == "0"
        assert not {"--moe-a2a-backend", "--enable-deepep-moe", "--deepep-mode"} & set(opts)
        assert check_args(release("sglang", version).server, opts) == []
    default = plan(pdsim.load_scenario("dsv3-h800-p4d9"), "sglang", version=version)
    for c in _server_cmds(default):
        assert "--moe-runner-backend" not in c.options and dict(c.env).get("SGL_ENABLE_JIT_DEEPGEMM") == "1"
    v = plan(pdsim.load_scenario("dsv3-h800-p4d9", sets[:2] + ["transfer.backend=nccl"]), "vllm")
    assert all(dict(c.env).get("VLLM_USE_DEEP_GEMM") == "0" for c in _server_cmds(v))
