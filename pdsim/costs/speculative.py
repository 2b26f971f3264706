"""Speculative decoding (MTP / EAGLE) prices: accepted tokens per step, and the step cost of a
draft-then-verify decode step (SGLang ``--speculative-algorithm NEXTN | EAGLE``).

One decode step of SGLang's EAGLE worker (MTP runs in it: ``NEXTN`` is resolved to ``EAGLE``),
as its source runs it (``python/sglang/srt/speculative/eagle_worker.py`` and ``eagle_info.py``,
read at Ant Group's ``h20-blog-20250926`` branch of SGLang, the engine of the H20 figures below):

- draft (``EAGLEWorker.draft`` / ``draft_forward``): ``num_steps - 1`` forward passes of the
  draft (DeepSeek's MTP module: one decoder layer of the target's shape sharing its embedding
  and LM head, after ``eh_proj``, an unquantised BF16 linear of 2 x hidden -> hidden over the
  token embedding and the previous hidden state, ``models/deepseek_nextn.py``; EAGLE: a small
  draft model with the same ``fc``, ``models/llama_eagle.py``; EAGLE-3's ``fc`` takes 3 x hidden
  of target states, in the draft extend only, ``llama_eagle3.py``), each over ``topk`` tokens per sequence, reading
  their context, with its LM head over those tokens and a softmax + top-k over the vocabulary.
  The first draft token comes from the previous step's draft-extend logits, so the loop
  breaks before its last forward ("we get 1 token from draft prefill and (#spec steps - 1)
  tokens here"): one draft step runs no draft forward at all. The passes replay as one CUDA
  graph (``EAGLEDraftCudaGraphRunner``, captured only when ``num_steps > 1``): no host work
  between them;
- verify (``EAGLEWorker.verify``): one forward pass of the target over ``num_draft_tokens``
  tokens per sequence: the GEMMs see batch x draft tokens rows, attention reads each context
  once but does draft-tokens times the FLOPs (``decode_tokens_per_seq`` of the step models);
  the logits of every draft token, then sampling over batch x draft tokens x vocabulary
  (``EagleVerifyInput.verify``: argmax or the tree sampling kernel);
- draft extend (``forward_draft_extend_after_decode``): the draft runs once more over the
  verified tokens of every sequence (padded to ``num_steps + 1`` per sequence, the shape
  ``EAGLEDraftExtendCudaGraphRunner`` replays) to write its KV and produce the hidden state
  and top-k the next step's first draft token comes from; its logits only for each
  sequence's last token (``CaptureHiddenMode.LAST``, one logit row per sequence), then a
  softmax + top-k. Under DP attention every rank runs it, idle ones included;
- host syncs: the step waits on the GPU where the host reads device values
  (``HOST_SYNCS_PER_STEP``: ``.item()`` in the draft's preparation, ``.tolist()`` / ``.cpu()``
  and a boolean-mask index after verification, the DP ranks' batch-size all-gather read back
  with ``.tolist()``); SGLang turns its overlap scheduler off with EAGLE (``server_args``
  ``_handle_speculative_decoding``), so after each the GPU idles until the host has issued the
  next kernel (``host_sync_s``);
- the sequence advances by 1 + the drafts accepted: with ``rates[i]`` the probability that
  position i+1 is accepted given 1..i were, P(at least j accepted) = rates[0] x ... x rates[j-1].

Phenomenon (Ant Group on H20, LMSYS 2025-09-26, "Config for MTP"): at batch 32 per GPU more
draft tokens cost (675 -> 554 tok/s per GPU, -18%), at batch 1 they pay (43 -> 52, +21%). What
the source shows is priced here; docs/mechanisms/speculative.md says what remains unexplained.

Prefill steps run the draft once over the new tokens too (the draft's KV), so a prefill chunk
costs target + one draft pass. Acceptance defaults: DeepSeek MTP measured on H20 by SGLang
(features.DEEPSEEK_MTP_ACCEPT).

``SpeculativeStepCost`` wraps a target and a draft StepCost and is itself a StepCost (same
interface and linearity contract as base.py), so the world can use it in place of the plain
model; the world must then advance each decoding sequence by ``1 + sample_accepted(...)``
tokens per step.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..specs.features import SpeculativeSpec
from ..specs.model import ModelSpec


def accepted_pmf(rates) -> np.ndarray:
    """P(exactly j drafts accepted), j = 0..len(rates)."""
    surv = np.cumprod([1.0] + [float(r) for r in rates])  # P(at least j accepted)
    return surv - np.append(surv[1:], 0.0)


def expected_accepted(rates) -> float:
    """Mean drafts accepted per step: sum over j of P(at least j accepted)."""
    return float(np.sum(np.cumprod([float(r) for r in rates])))


def tokens_per_step(spec: SpeculativeSpec) -> float:
    """Mean tokens a sequence advances per decode step (the accept length SGLang logs)."""
    return 1.0 + expected_accepted(spec.rates)


def sample_accepted(spec: SpeculativeSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """Drafts accepted by each of ``n`` sequences in one step (integers in 0..num_steps)."""
    return rng.choice(len(spec.rates) + 1, size=n, p=accepted_pmf(spec.rates))


def mtp_draft_model(model: ModelSpec, spec: SpeculativeSpec) -> ModelSpec:
    """The MTP module as a model: ``draft_layers`` decoder layers of the target's shape (MoE
    layers for an MoE target), sharing its vocabulary (embedding and LM head)."""
    if model.mtp_layers < spec.draft_layers and spec.method == "mtp":
        from ..specs.errors import SpecError

        raise SpecError(f"{model.name} ships {model.mtp_layers} MTP layer(s); MTP drafting needs {spec.draft_layers} "
                        "(set the model's mtp_layers from its num_nextn_predict_layers)", field="speculative.draft_layers")
    return dataclasses.replace(model, name=f"{model.name}-mtp", num_layers=spec.draft_layers,
                               num_dense_layers=0 if model.moe else None)


# Host syncs of one decode step of SGLang's EAGLE worker (h20-blog-20250926 branch, topk 1,
# page size > 1, no grammar or logprobs), each a read of device values that waits for the GPU:
# - eagle_worker._draft_preprocess_decode: ``torch.sum(batch.seq_lens).item()``;
# - eagle_info.EagleVerifyInput.verify: ``accept_index.tolist()``, ``predict.tolist()``,
#   ``accept_length.cpu()``, and ``batch.out_cache_loc[evict_mask]`` (a boolean-mask index,
#   "leads to a device sync" as the source's own comment says).
HOST_SYNCS_PER_STEP = 5
# Under DP attention the scheduler all-gathers the ranks' batch sizes every step
# (scheduler.prepare_mlp_sync_batch_raw); with the overlap scheduler off (EAGLE) it runs on the
# device group and is read back with ``.tolist()``: one more sync.
DP_HOST_SYNCS_PER_STEP = 1
# The host's issue time of one CUDA kernel where the profile has no measured one: the H100
# session's measurement (calibration/data/launch.csv, ``launch_host``: 2,000 one-element kernels,
# 10.55 us each, 2026-11-26), borrowed: it is host CPU and driver time, not the GPU's.
BORROWED_LAUNCH_HOST_US = 10.55
# Bytes per vocabulary entry of the sampling kernels around the logits (FP32 logits): a draft
# pass's and the draft extend's softmax (read + write) and top-k (read); the verify's greedy
# argmax (read). Non-greedy verification (softmax, top-k / top-p renormalisation, tree sampling)
# reads more; greedy is the floor.
DRAFT_SAMPLE_BYTES = 12.0
VERIFY_SAMPLE_BYTES = 4.0
# Inputs (x hidden) of the draft's fusing linear, BF16 (module doc): MTP's ``eh_proj`` and
# EAGLE's ``fc`` in every draft forward; EAGLE-3's over three target layers, in the extend only.
FUSE_INPUTS = {"mtp": 2, "eagle": 2, "eagle3": 3}


def host_sync_s(hw) -> float:
    """Seconds the GPU idles at one host sync with no host work after it: the host issues the
    device-to-host copy and waits for it, then issues the next kernel; the GPU has nothing
    queued through both issues (2 x the host's per-kernel issue time: the profile's measured
    ``calibration.host.kernel_launch_us``, else ``BORROWED_LAUNCH_HOST_US``)."""
    host = (getattr(hw, "calibration", None) or {}).get("host") or {}
    return 2.0 * float(host.get("kernel_launch_us", BORROWED_LAUNCH_HOST_US)) * 1e-6


class SpeculativeStepCost:
    """A StepCost whose decode steps are SGLang's EAGLE step (module doc): ``num_steps - 1``
    draft passes, the target's verify over ``num_draft_tokens`` tokens per sequence, the draft
    extend over ``num_steps + 1`` tokens per sequence, the sampling kernels and host syncs."""

    def __init__(self, target, draft, spec: SpeculativeSpec):
        self.target, self.draft, self.spec = target, draft, spec
        self.name = f"{target.name}+{spec.method}"
        self.q = spec.num_draft_tokens
        self.steps = spec.num_steps
        self.passes = spec.num_steps - 1  # draft_forward breaks before the last forward (module doc)
        self.topk = spec.topk
        self.n_ext = spec.num_steps + 1  # the draft-extend CUDA graph's tokens per sequence
        hw = getattr(target, "hw", None)
        dp = getattr(target, "dp", 1)
        self.sync = (HOST_SYNCS_PER_STEP + (DP_HOST_SYNCS_PER_STEP if dp > 1 else 0)) * host_sync_s(hw) \
            if hw is not None else 0.0
        self.dp = dp
        # the sampling kernels are memory-bound passes over batch x vocabulary FP32 logits
        hbm = getattr(draft, "hbm_peak", 0.0) * (hw.efficiency.hbm if hw is not None else 0.0)
        model = getattr(draft, "model", None)
        self.vocab_s = (model.vocab / hbm) if (hbm and model is not None) else 0.0  # s per row per byte/entry
        self.kern_lat = hw.efficiency.mem_latency_us * 1e-6 if hw is not None else 0.0
        self._lm_trim: dict[int, float] = {}
        self._fuse = self._fuse_gemm(draft, FUSE_INPUTS.get(spec.method, 2))
        self._fuse_in_passes = spec.method != "eagle3"

    @staticmethod
    def _fuse_gemm(draft, inputs: int):
        """Seconds of the draft's fusing linear (``FUSE_INPUTS`` x hidden -> hidden, BF16) at M
        rows on a rank: a GEMM of the draft's own BF16 kernel constants (the LM head's, roofline.py)
        over weights every GPU holds whole."""
        k = getattr(getattr(draft, "kernels", None), "lm_gemm", None)
        model = getattr(draft, "model", None)
        if k is None or model is None:
            return None
        from .step import _gemm
        kn = inputs * model.hidden * model.hidden
        return _gemm((2.0 * kn / (k.peak * k.eff), k.m_tile, 2.0 * kn / (draft.hbm_peak * k.hbm_eff), k.lat, k.sharp))

    def _extend_lm_trim(self, decode_batch: int) -> float:
        """Seconds of the draft extend's LM head the draft model prices beyond SGLang's one
        logit row per sequence (the step models price logits for every query token)."""
        t = self._lm_trim.get(decode_batch)
        if t is None:
            br = self.draft.breakdown
            full = br(0, 0.0, 0, decode_batch, 0.0, decode_tokens_per_seq=self.n_ext).get("lm_head", 0.0)
            last = br(0, 0.0, 0, decode_batch, 0.0).get("lm_head", 0.0)
            t = self._lm_trim[decode_batch] = max(full - last, 0.0)
        return t

    def _sampling_s(self, decode_batch: int) -> float:
        """The vocabulary-wide sampling kernels of one step on a DP rank: each draft pass's
        softmax + top-k over topk rows per sequence, the draft extend's over one row, the
        verify's argmax over num_draft_tokens rows (module constants)."""
        if not self.vocab_s:
            return 0.0
        seqs = decode_batch / self.dp
        draft_rows = (self.passes * self.topk + 1) * seqs
        kernels = 2 * (self.passes + 1) + 1
        return self.vocab_s * (draft_rows * DRAFT_SAMPLE_BYTES + seqs * self.q * VERIFY_SAMPLE_BYTES) \
            + kernels * self.kern_lat

    def step_coeffs(self, prefill_tokens: int, prefill_seqs: int, decode_batch: int, *,
                    rank_tokens: float | None = None) -> tuple[float, float, float]:
        """(c0, c_attn, c_ctx) of one step (base.py); ``rank_tokens`` is the busiest DP rank's
        verify tokens (decode sequences x num_draft_tokens + prefill tokens)."""
        t0, ta, tc = self.target.step_coeffs(prefill_tokens, prefill_seqs, decode_batch, rank_tokens=rank_tokens,
                                             decode_tokens_per_seq=self.q if decode_batch else 1)
        seqs_rank = None if rank_tokens is None else rank_tokens / self.q
        d0, da, dc = self.draft.step_coeffs(prefill_tokens, prefill_seqs, 0) if prefill_tokens else (0.0, 0.0, 0.0)
        fuse = self._fuse
        if fuse is not None and prefill_tokens:
            d0 += fuse(prefill_tokens / self.dp)
        seqs = seqs_rank if seqs_rank is not None else decode_batch / self.dp
        if decode_batch:
            if self.passes:
                s0, _, sc = self.draft.step_coeffs(0, 0, decode_batch, decode_tokens_per_seq=self.topk,
                                                   rank_tokens=None if seqs_rank is None else seqs_rank * self.topk)
                d0 += self.passes * s0
                dc += self.passes * sc
                if fuse is not None and self._fuse_in_passes:
                    d0 += self.passes * fuse(seqs * self.topk)
            # draft extend after verification: the draft over the verified tokens of every
            # sequence (its KV and hidden state for the next draft), padded to num_steps + 1,
            # logits for each sequence's last token only
            e0, _, ec = self.draft.step_coeffs(0, 0, decode_batch, decode_tokens_per_seq=self.n_ext,
                                               rank_tokens=None if seqs_rank is None else seqs_rank * self.n_ext)
            d0 += e0 - self._extend_lm_trim(decode_batch)
            if fuse is not None:
                d0 += fuse(seqs * self.n_ext)
            dc += ec
            d0 += self._sampling_s(decode_batch) + self.sync
        return t0 + d0, ta + da, tc + dc

    def step_time(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int, decode_batch: int,
                  decode_ctx: float, *, rank_tokens: float | None = None) -> float:
        c0, ca, cc = self.step_coeffs(prefill_tokens, prefill_seqs, decode_batch, rank_tokens=rank_tokens)
        return c0 + ca * prefill_attn + cc * decode_ctx

    def breakdown(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int, decode_batch: int,
                  decode_ctx: float, *, rank_tokens: float | None = None) -> dict[str, float]:
        """Seconds per component: the target's verify parts, plus ``draft`` for the rest of the
        step (draft passes, draft extend, sampling kernels, host syncs)."""
        out = self.target.breakdown(prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx,
                                    rank_tokens=rank_tokens, decode_tokens_per_seq=self.q if decode_batch else 1)
        total = self.step_time(prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx, rank_tokens=rank_tokens)
        out["draft"] = total - sum(out.values())
        return out
