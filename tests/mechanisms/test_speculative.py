"""Speculative decoding prices every pass: draft steps, verification, and the draft-extend pass
after verification (costs/speculative.py).

Source: Ant Group, LMSYS blog 2025-09-26 "Together with SGLang: Best Practices for Serving
DeepSeek-R1 on H20-96G", "Config for MTP": at batch 32 per GPU (attention DP16 + EP16), more
draft tokens lower throughput from 675 to 554 tok/s per GPU (~18% loss: the shorter accept
length per draft wastes compute on a compute-poor GPU); at batch 1 they raise it from 43 to 52
tok/s (~21% gain). Accept lengths 1.85 / 2.55 / 3.1 for 1 / 2 / 3 draft steps (the same blog;
specs/features.DEEPSEEK_MTP_ACCEPT).
"""
from __future__ import annotations

from ._deepseek import mtp_tok_s_per_gpu


def test_more_draft_tokens_cost_at_batch_32():
    one, two, three = (mtp_tok_s_per_gpu(32, s) for s in (1, 2, 3))
    assert two < one and three < two
    assert three / one - 1 < -0.08  # Ant: -18%


def test_more_draft_tokens_pay_at_batch_1():
    one, three = mtp_tok_s_per_gpu(1, 1), mtp_tok_s_per_gpu(1, 3)
    assert three / one - 1 > 0.10  # Ant: +21%
