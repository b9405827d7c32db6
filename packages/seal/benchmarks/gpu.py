"""GPU benchmark for seal: self-refinement vs anonymize-only, and the KV cache, on a 0.5B-class Llama.

Run on one CUDA GPU (an H100/H200, under 5 minutes) from the repository root::

    uv run python packages/seal/benchmarks/gpu.py --out seal-gpu.json

``--toy`` runs tiny shapes on whatever device there is (the CPU without a GPU; a test does this so
the script is known to work). seal has no Triton kernel, so nothing needs the interpreter.

The model is a random-init ``LlamaForCausalLM`` with Qwen2.5-0.5B's shape (hidden 896, 24 layers,
14 heads, 2 KV heads, MLP 4,864, vocabulary 151,936; ~0.5B parameters), bf16; the prompts are the
student's real prompt formats on synthetic profiles, encoded with a ``WordTokenizer`` of the
profiles' words (ids far below the vocabulary size). A random model never stops on its own, so
every generation is forced to a fixed length (``min_new_tokens = max_new_tokens``): a rewrite
``R`` = 128 tokens, a critique (``<priv>`` / ``<util>``) ``C`` = 48 tokens, the ``SelfRefiner``
defaults. Per batch size 1, 4, 16, 32:

1. ``iteration``: one self-refinement iteration (rewrite + infer + judge: three generations) against
   anonymize-only (the rewrite alone); the ratio of medians (the paper: about 3x generation).
2. ``kv_cache``: tokens/s of the rewrite generation with and without the KV cache. In ``--toy``
   (fp32) the greedy outputs are checked equal first; in bf16 the two paths round differently, so
   the share of equal tokens is reported instead.

GPU numbers are not measured in this repository yet (no GPU was lent); see the README.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from neurips25_core.bench import environment, time_fn

#: Qwen2.5-0.5B's shape as a Llama config (the "0.5B Llama" of the issue).
SHAPE_05B = dict(
    vocab_size=151_936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    rope_theta=1_000_000.0,
    tie_word_embeddings=True,
)


def _model(toy: bool, tokenizer, device, dtype):
    from transformers import LlamaConfig

    from neurips25_core.models import tiny_llama, tiny_llama_config

    special = dict(
        pad_token_id=tokenizer.pad_id, bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.eos_id
    )
    if toy:
        config = tiny_llama_config(
            hidden_size=64,
            num_layers=2,
            num_heads=4,
            num_kv_heads=2,
            intermediate_size=128,
            vocab_size=len(tokenizer),
            max_position_embeddings=1024,
            **special,
        )
    else:
        config = LlamaConfig(**SHAPE_05B, **special)
    return tiny_llama(config, seed=0).to(device=device, dtype=dtype).eval()


def _prompts(n: int):
    """``n`` (anon, priv, util) prompt triples on synthetic profiles, and their tokenizer."""
    from seal import LexiconInferrer, SyntheticProfiles, WordTokenizer
    from seal.distill import anon_prompt, format_leaks, format_utility, priv_prompt, util_prompt
    from seal.refine import PERFECT

    profiles = SyntheticProfiles(n, seed=0)
    texts = [p.text for p in profiles]
    leaks = LexiconInferrer().infer(texts)
    anon = [anon_prompt(t, g, PERFECT) for t, g in zip(texts, leaks, strict=True)]
    priv = [priv_prompt(t) for t in texts]
    util = [util_prompt(t, t) for t in texts]
    corpus = anon + priv + util + [format_leaks(g) for g in leaks] + [format_utility(PERFECT)]
    return anon, priv, util, WordTokenizer.from_corpus(corpus)


def run(toy: bool, device: torch.device) -> dict:
    from seal.refine import SelfRefiner

    dtype = torch.float32 if toy else torch.bfloat16
    batches = (1, 2) if toy else (1, 4, 16, 32)
    rewrite, critique = (8, 4) if toy else (128, 48)
    anon, priv, util, tokenizer = _prompts(max(batches))
    model = _model(toy, tokenizer, device, dtype)
    params = sum(p.numel() for p in model.parameters())
    cached = SelfRefiner(model, tokenizer, max_new_tokens=rewrite, critique_tokens=critique)
    uncached = SelfRefiner(
        model, tokenizer, max_new_tokens=rewrite, critique_tokens=critique, use_cache=False
    )
    min_time = 0.05 if toy else 1.0
    out: dict = {
        "parameters": params,
        "dtype": str(dtype),
        "rewrite_tokens": rewrite,
        "critique_tokens": critique,
        "batches": {},
    }
    for b in batches:
        a, p, u = anon[:b], priv[:b], util[:b]

        def anonymize_only(a=a):
            return cached.generate(a, rewrite, min_new_tokens=rewrite)

        def iteration(a=a, p=p, u=u):
            cached.generate(a, rewrite, min_new_tokens=rewrite)
            cached.generate(p, critique, min_new_tokens=critique)
            return cached.generate(u, critique, min_new_tokens=critique)

        def no_cache(a=a):
            return uncached.generate(a, rewrite, min_new_tokens=rewrite)

        with torch.no_grad():
            with_cache, without = anonymize_only(), no_cache()
            same = [x == y for x, y in zip(with_cache, without, strict=True)]
            words = [
                sum(i == j for i, j in zip(x.split(), y.split(), strict=False))
                / max(len(x.split()), 1)
                for x, y in zip(with_cache, without, strict=True)
            ]
            if toy and not all(same):
                raise AssertionError("greedy generation differs with and without the KV cache")
            t_anon = time_fn(anonymize_only, device=device, min_time=min_time, warmup=1)
            t_iter = time_fn(iteration, device=device, min_time=min_time, warmup=1)
            t_none = time_fn(no_cache, device=device, min_time=min_time, warmup=1)
        row = {
            "anonymize_only_s": t_anon.median,
            "iteration_s": t_iter.median,
            "iteration_over_anonymize": t_iter.median / t_anon.median,
            "kv_cache_tokens_per_s": b * rewrite / t_anon.median,
            "no_cache_tokens_per_s": b * rewrite / t_none.median,
            "kv_cache_speedup": t_none.median / t_anon.median,
            "cache_outputs_equal": sum(same) / len(same),
            "cache_word_agreement": sum(words) / len(words),
        }
        out["batches"][str(b)] = row
        print(f"batch {b}: {row}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toy", action="store_true", help="tiny shapes on any device (tests)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if not args.toy and not torch.cuda.is_available():
        print("gpu.py: no CUDA device; run with --toy for the tiny CPU check", file=sys.stderr)
        return 2
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    start = time.perf_counter()
    results = {"environment": environment(), "toy": args.toy, "device": str(device)}
    results["speed"] = run(args.toy, device)
    results["seconds"] = time.perf_counter() - start
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(results, handle, indent=1, default=str)
    print(f"gpu.py: done in {results['seconds']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
