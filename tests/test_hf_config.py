"""Hugging Face config.json as a model spec: the published configs of DeepSeek-V3, Llama-3.1-8B
and Qwen3-235B-A22B (workloads/models/hf, sources in its README) give the bundled models."""
from __future__ import annotations

import dataclasses
import json

import pytest

import pdsim
from pdsim.specs import SpecError, catalog
from pdsim.specs.hf_config import load_hf_config, model_from_hf_config

HF = catalog.models_dir() / "hf"


def _same(a, b, ignore=("name", "source", "quant", "mtp_layers", "max_context")):
    da, db = dataclasses.asdict(a), dataclasses.asdict(b)
    return {k: (da[k], db[k]) for k in da if k not in ignore and da[k] != db[k]}


@pytest.mark.parametrize("key", ["deepseek-v3", "llama-3.1-8b", "qwen3-235b-a22b"])
def test_published_configs_give_the_bundled_models(key):
    m = load_hf_config(HF / key / "config.json")
    assert m.name == key and not _same(m, catalog.load_model_ref(key))
    assert m.total_params == catalog.load_model_ref(key).total_params


def test_deepseek_config_fields():
    m = load_hf_config(HF / "deepseek-v3" / "config.json")
    assert m.attention == "mla" and m.mla.kv_lora_rank == 512 and m.mla.q_lora_rank == 1536
    assert m.moe.num_experts == 256 and m.moe.top_k == 8 and m.moe.num_shared_experts == 1 and m.n_dense_layers == 3
    assert m.weight_dtype == "fp8" and m.quant.method == "fp8_block" and m.mtp_layers == 1
    assert m.kv_bytes_per_token() == 70_272


def test_qwen_moe_dense_layers_from_sparse_step():
    cfg = json.loads((HF / "qwen3-235b-a22b" / "config.json").read_text())
    assert model_from_hf_config(cfg, "q").n_dense_layers == 0
    cfg.update(decoder_sparse_step=2, mlp_only_layers=[0])
    m = model_from_hf_config(cfg, "q")
    assert m.n_dense_layers == 47 and m.ffn == 12288 and m.kv_replication(8) == 2


def test_quantization_configs():
    cfg = json.loads((HF / "llama-3.1-8b" / "config.json").read_text())
    awq = model_from_hf_config({**cfg, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}, "a")
    assert awq.quant.method == "awq" and awq.weight_bytes_per_param < 0.6
    gptq = model_from_hf_config({**cfg, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": -1}}, "g")
    assert gptq.quant.bits == 4 and gptq.quant.group_size >= 1
    w8 = {"quant_method": "compressed-tensors", "config_groups": {"g0": {"weights": {"num_bits": 8, "type": "int"},
                                                                        "input_activations": {"num_bits": 8}}}}
    assert model_from_hf_config({**cfg, "quantization_config": w8}, "w").gemm_dtype == "int8"


def test_errors_name_the_file_and_field(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 100}))
    with pytest.raises(SpecError, match=f"{p}: num_hidden_layers: missing"):
        load_hf_config(p)
    p.write_text('{"num_hidden_layers": ')
    with pytest.raises(SpecError, match="invalid JSON"):
        load_hf_config(p)
    cfg = json.loads((HF / "llama-3.1-8b" / "config.json").read_text())
    p.write_text(json.dumps({**cfg, "quantization_config": {"quant_method": "bitsandbytes"}}))
    with pytest.raises(SpecError, match="quantization_config.quant_method: unsupported"):
        load_hf_config(p)


def test_a_scenario_may_name_a_config_json():
    sc = pdsim.load_scenario("llama8b-a800-colocated", [f"model={HF / 'llama-3.1-8b' / 'config.json'}"])
    assert sc.model.name == "llama-3.1-8b" and sc.model.num_layers == 32
