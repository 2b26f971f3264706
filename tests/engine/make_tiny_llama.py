"""Generate the tiny randomly initialised Llama the engine tests serve with vLLM's CPU build.

Nothing is downloaded: a byte-level BPE tokenizer is trained offline with ``tokenizers`` on a
deterministic synthetic corpus, and a ``LlamaForCausalLM`` is initialised from a seeded RNG;
both are written with ``save_pretrained`` (safetensors). Same arguments, same files: the
weights are never committed, CI regenerates them (``.ci/engine.sh``).

Run with the engine venv's python (it has torch, transformers and tokenizers):
    /work/venvs/vllm/bin/python tests/engine/make_tiny_llama.py --out DIR

The shape is recorded in ``workloads/models/tiny-llama.yaml`` (pdsim's model spec of it);
tests/engine checks the two agree.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

# The model's shape: a few layers, hidden a few hundred, GQA like Llama 3.
SHAPE = {
    "vocab_size": 4096,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
}
DTYPE = "bfloat16"
SEED = 0
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>"]


def corpus(seed: int, lines: int = 20000) -> list[str]:
    """Deterministic English-like text: words made of common syllables, so BPE learns
    multi-character merges the way it does on real text."""
    rng = random.Random(seed)
    syl = ["the", "an", "in", "er", "on", "at", "en", "re", "ing", "ed", "to", "of", "and", "is", "it", "or",
           "al", "ar", "st", "ent", "ion", "ter", "ver", "pro", "com", "con", "de", "ly", "ment", "ness", "ous",
           "ful", "able", "ity", "ch", "sh", "th", "qu", "ph", "ra", "lo", "mi", "ka", "no", "pe", "su", "vi"]
    words = ["".join(rng.choice(syl) for _ in range(rng.randint(1, 3))) for _ in range(3000)]
    out = []
    for _ in range(lines):
        n = rng.randint(5, 25)
        s = " ".join(rng.choice(words) for _ in range(n))
        out.append(s.capitalize() + rng.choice([".", ",", "?", "!", ";", ":"]) + " " + str(rng.randint(0, 9999)))
    return out


def fingerprint() -> str:
    blob = json.dumps({"shape": SHAPE, "dtype": DTYPE, "seed": SEED, "template": CHAT_TEMPLATE, "v": 1}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def make(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=SHAPE["vocab_size"], special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(SEED), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", model_max_length=SHAPE["max_position_embeddings"])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(SEED)
    cfg = LlamaConfig(**SHAPE, bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                      pad_token_id=fast.pad_token_id, tie_word_embeddings=False, torch_dtype=DTYPE)
    model = LlamaForCausalLM(cfg).to(getattr(torch, DTYPE))
    model.save_pretrained(out, safe_serialization=True)
    (out / "pdsim-fingerprint").write_text(fingerprint() + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="directory to write (config, weights, tokenizer)")
    ap.add_argument("--force", action="store_true", help="regenerate even when the directory is up to date")
    args = ap.parse_args()
    stamp = args.out / "pdsim-fingerprint"
    if not args.force and stamp.is_file() and stamp.read_text().strip() == fingerprint():
        print(f"{args.out}: up to date")
        return
    make(args.out)
    print(f"{args.out}: tiny Llama written ({fingerprint()})")


if __name__ == "__main__":
    main()
