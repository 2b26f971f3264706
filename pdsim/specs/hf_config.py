"""A Hugging Face ``config.json`` as a pdsim model spec.

``scenario.model`` may name a local config.json (``model: models/DeepSeek-V3/config.json``);
``model.load_model`` hands it here. Fields read (Transformers' names):

- shape: ``num_hidden_layers``, ``hidden_size``, ``intermediate_size``, ``num_attention_heads``,
  ``num_key_value_heads`` (default: the head count), ``head_dim`` (default hidden / heads),
  ``vocab_size``, ``tie_word_embeddings``, ``max_position_embeddings``, ``torch_dtype``;
  GPT-2 style ``n_layer``/``n_embd``/``n_head``/``n_inner`` too; multimodal configs are read from
  their ``text_config``;
- MLA (DeepSeek-V2/V3): ``kv_lora_rank``, ``q_lora_rank`` (null = no query compression),
  ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``;
- MoE: ``n_routed_experts`` / ``num_experts`` / ``num_local_experts``, ``num_experts_per_tok``,
  ``moe_intermediate_size``, ``n_shared_experts``; dense layers from ``first_k_dense_replace``
  (DeepSeek) or ``mlp_only_layers`` and ``decoder_sparse_step`` (Qwen-MoE);
  ``num_nextn_predict_layers`` (DeepSeek MTP);
- ``quantization_config``: ``quant_method`` fp8 (with ``weight_block_size`` = block FP8), gptq,
  awq (``bits``/``w_bit``, ``group_size``/``q_group_size``), compressed-tensors W8A8 (int or
  float 8-bit weights and activations).

A field that is missing or of the wrong kind raises SpecError naming the file and the field.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import SpecError
from .features import QuantSpec
from ._convert import load_spec
from .model import MLASpec, ModelSpec, MoESpec


def _get(cfg: dict, key: str, source: str, kind: type = int, default: Any = ...) -> Any:
    if key not in cfg or cfg[key] is None:
        if default is ...:
            raise SpecError(f"missing in the config (expected {kind.__name__})", source=source, field=key)
        return default
    v = cfg[key]
    if kind is int and isinstance(v, float) and v.is_integer():
        v = int(v)
    if kind is float and isinstance(v, int) and not isinstance(v, bool):
        v = float(v)
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        raise SpecError(f"expected {kind.__name__}, got {v!r}", source=source, field=key)
    return v


def _dtype(cfg: dict) -> str:
    d = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    return {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(d, "bf16")


def _quant(cfg: dict, source: str) -> tuple[QuantSpec | None, str | None]:
    """(QuantSpec, weight dtype override) from ``quantization_config``."""
    q = cfg.get("quantization_config")
    if not q:
        return None, None
    if not isinstance(q, dict):
        raise SpecError(f"expected a mapping, got {q!r}", source=source, field="quantization_config")
    method = str(q.get("quant_method", "")).lower()
    where = "quantization_config.quant_method"
    if method == "fp8":
        return QuantSpec("fp8_block" if q.get("weight_block_size") else "fp8", 8), "fp8"
    if method in ("gptq", "awq"):
        bits = q.get("bits", q.get("w_bit"))
        group = q.get("group_size", q.get("q_group_size", 128))
        if not isinstance(bits, int):
            raise SpecError(f"expected the weight bits as an integer, got {bits!r}", source=source,
                            field="quantization_config.bits")
        if not isinstance(group, int) or group < 1:  # GPTQ writes -1 for one group per column
            group = q.get("group_size") if isinstance(q.get("group_size"), int) and q["group_size"] > 0 else 4096
        try:
            return QuantSpec(method, bits, group), None
        except SpecError as err:
            raise err.at(source=source, prefix="quantization_config") from None
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        for g in groups.values():
            w = (g or {}).get("weights") or {}
            a = (g or {}).get("input_activations") or {}
            if w.get("num_bits") == 8 and a.get("num_bits") == 8:
                return (QuantSpec("w8a8_int8", 8), None) if w.get("type") == "int" else (QuantSpec("w8a8_fp8", 8), "fp8")
        raise SpecError("only 8-bit weight + 8-bit activation compressed-tensors schemes are modelled",
                        source=source, field="quantization_config.config_groups")
    raise SpecError(f"unsupported quant_method {method!r}; expected fp8, gptq, awq or compressed-tensors",
                    source=source, field=where)


def _dense_layers(cfg: dict, layers: int, source: str) -> int:
    if "first_k_dense_replace" in cfg:
        return _get(cfg, "first_k_dense_replace", source)
    dense = set(cfg.get("mlp_only_layers") or [])
    step = _get(cfg, "decoder_sparse_step", source, default=1)
    if step < 1:
        raise SpecError(f"must be >= 1, got {step}", source=source, field="decoder_sparse_step")
    for i in range(layers):  # Qwen-MoE: layer i is sparse when (i + 1) % step == 0
        if (i + 1) % step != 0:
            dense.add(i)
    return len(dense)


def model_from_hf_config(cfg: dict, name: str, source: str = "<config.json>") -> ModelSpec:
    """ModelSpec from a parsed config.json mapping."""
    if not isinstance(cfg, dict):
        raise SpecError("expected a JSON object at the top level", source=source)
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], "quantization_config": cfg.get("quantization_config"),
               "torch_dtype": cfg["text_config"].get("torch_dtype") or cfg.get("torch_dtype")}
    gpt2 = "n_layer" in cfg and "num_hidden_layers" not in cfg
    if gpt2:
        layers, hidden, heads = (_get(cfg, k, source) for k in ("n_layer", "n_embd", "n_head"))
        ffn = _get(cfg, "n_inner", source, default=4 * hidden)
        return ModelSpec(name=name, num_layers=layers, hidden=hidden, vocab=_get(cfg, "vocab_size", source),
                         num_heads=heads, num_kv_heads=heads, head_dim=hidden // heads, attention="mha", ffn=ffn,
                         gated_mlp=False, tied_embeddings=True, weight_dtype=_dtype(cfg), kv_dtype=_dtype(cfg),
                         max_context=_get(cfg, "n_positions", source, default=1024), source=source)
    layers = _get(cfg, "num_hidden_layers", source)
    hidden = _get(cfg, "hidden_size", source)
    heads = _get(cfg, "num_attention_heads", source)
    kv_heads = _get(cfg, "num_key_value_heads", source, default=heads)
    dtype = _dtype(cfg)
    quant, wdtype = _quant(cfg, source)
    mla = None
    if "kv_lora_rank" in cfg:
        mla = MLASpec(q_lora_rank=_get(cfg, "q_lora_rank", source, default=0), kv_lora_rank=_get(cfg, "kv_lora_rank", source),
                      qk_rope_dim=_get(cfg, "qk_rope_head_dim", source), qk_nope_dim=_get(cfg, "qk_nope_head_dim", source),
                      v_head_dim=_get(cfg, "v_head_dim", source))
    head_dim = mla.qk_nope_dim if mla else _get(cfg, "head_dim", source, default=hidden // heads)
    experts = next((cfg[k] for k in ("n_routed_experts", "num_experts", "num_local_experts") if cfg.get(k)), None)
    moe, dense = None, None
    if experts:
        if not isinstance(experts, int):
            raise SpecError(f"expected an integer, got {experts!r}", source=source, field="n_routed_experts")
        top_k = _get(cfg, "num_experts_per_tok", source)
        inter = _get(cfg, "moe_intermediate_size", source, default=None) or _get(cfg, "intermediate_size", source)
        try:
            moe = MoESpec(num_experts=experts, top_k=top_k, expert_ffn=inter,
                          num_shared_experts=_get(cfg, "n_shared_experts", source, default=0))
        except SpecError as err:
            raise err.at(source=source) from None
        dense = _dense_layers(cfg, layers, source)
    ffn = _get(cfg, "intermediate_size", source, default=0)
    try:
        return ModelSpec(name=name, num_layers=layers, hidden=hidden, vocab=_get(cfg, "vocab_size", source),
                         num_heads=heads, head_dim=head_dim, attention="mla" if mla else ("gqa" if kv_heads < heads else "mha"),
                         num_kv_heads=0 if mla else kv_heads, ffn=ffn if (moe is None or dense) else 0,
                         num_dense_layers=dense, mla=mla, moe=moe, weight_dtype=wdtype or dtype,
                         kv_dtype="bf16" if dtype == "fp32" else dtype,
                         tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                         max_context=_get(cfg, "max_position_embeddings", source, default=131072),
                         quant=quant, mtp_layers=_get(cfg, "num_nextn_predict_layers", source, default=0), source=source)
    except SpecError as err:
        raise err.at(source=source) from None


def load_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """Read a local config.json; the model is named after its folder unless ``name`` is given."""
    p = Path(path)
    try:
        cfg = json.loads(p.read_text())
    except FileNotFoundError:
        raise SpecError("file not found", source=str(path)) from None
    except json.JSONDecodeError as err:
        raise SpecError(f"line {err.lineno}, column {err.colno}: invalid JSON: {err.msg}", source=str(path)) from None
    return model_from_hf_config(cfg, name or (p.parent.name if p.name == "config.json" else p.stem), str(path))


def load_model(path) -> "ModelSpec":
    """A model YAML, or a Hugging Face ``config.json`` (this module)."""
    if str(path).endswith(".json"):
        return load_hf_config(path)
    return load_spec(ModelSpec, path)
