"""qcs GPU measurements (issue 36): QCS vs LESS cost on Pythia configs, then an unscaled selection.

    uv run python packages/qcs/benchmarks/gpu.py --out qcs-gpu.json     # H100/H200, < 5 min
    uv run python packages/qcs/benchmarks/gpu.py --toy --out toy.json   # seconds, CPU (tests)

1. Correctness first: on the model and device under test, one LoRA rollout twice from the same
   seed gives the same loss (the shared start point), and a LESS feature is unit-norm and finite.
2. Cost, random-initialised Pythia-160M and -410M configs (``GPTNeoXConfig``; LoRA r = 8 on the
   fused ``query_key_value``, since GPT-NeoX has no separate q/v projections): one QCS outer step
   (K = 4 LoRA rollouts of 20 steps, batch 8 × 512 tokens, each scored on 32 validation examples)
   against LESS's feature extraction for 256 examples at one checkpoint (one backward per example,
   Adam preconditioning, projection to 512); wall time and peak CUDA memory of each
   (``torch.cuda.max_memory_allocated``), plus per-unit costs to extrapolate (a QCS selection is
   ``outer × K`` rollouts; LESS is ``C × (n + V)`` single-example backwards).
3. The spec's unscaled selection on the byte Llama of the reduced reproduction: 200 outer
   iterations × K = 4 × 20 LoRA steps, budget 5 %, one seed, QCS against random, same final fine-tune
   (:class:`qcs.experiment.QualityExperiment` on the GPU).

``--toy`` shrinks every size (a 1-layer width-32 config, 2 outer steps) and runs on CPU when there
is no GPU; the tests run it. No GPU number has been measured for this package yet.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_reset(device):
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _peak(device) -> int | None:
    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None


def _timed(fn, device):
    _peak_reset(device)
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - t0, _peak(device)


def synthetic_encoding(n: int, seq_len: int, vocab: int, seed: int) -> dict:
    """Random token sequences with the response in the second half (instruction = context)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (n, seq_len), generator=g)
    labels = torch.full((n, seq_len), -100, dtype=torch.long)
    start = seq_len // 2
    labels[:, start - 1 : -1] = ids[:, start:]
    return {
        "input_ids": ids,
        "labels": labels,
        "token_lengths": torch.full((n,), seq_len - start, dtype=torch.long),
        "response_start": torch.full((n,), start - 1, dtype=torch.long),
    }


def pythia_config(name: str, toy: bool):
    from transformers import GPTNeoXConfig

    if toy:
        return GPTNeoXConfig(
            vocab_size=256,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=256,
        )
    dims = {"pythia-160m": (768, 12, 12), "pythia-410m": (1024, 24, 16)}[name]
    h, layers, heads = dims
    return GPTNeoXConfig(
        vocab_size=50304,
        hidden_size=h,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * h,
        max_position_embeddings=2048,
        rotary_pct=0.25,
        use_parallel_residual=True,
    )


def cost(name: str, device, toy: bool) -> dict:
    from qcs import QCSConfig, QCSSelector
    from qcs.less import less_features, less_warmup
    from qcs.rollouts import LoRARollouts
    from transformers import GPTNeoXForCausalLM

    cfg = pythia_config(name, toy)
    seq = 32 if toy else 512
    n_less, n_pool, n_val = (8, 16, 4) if toy else (256, 512, 32)
    K, steps, batch = (2, 2, 2) if toy else (4, 20, 8)
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(cfg).to(device)
    pool = synthetic_encoding(n_pool, seq, cfg.vocab_size, 0)
    val = synthetic_encoding(n_val, seq, cfg.vocab_size, 1)
    lora = dict(target_modules=("query_key_value",))
    ro = LoRARollouts(model, pool, val, steps=steps, batch_size=batch, eval_batch_size=8, **lora)
    ones = torch.ones(ro.n, ro.max_tokens)

    def rollout():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return ro.eval_fn(ro.train_fn(ones))

    f1, f2 = rollout(), rollout()
    same_start = f1 == f2
    qcs_cfg = QCSConfig(budget=max(1, n_pool // 20), rollouts=K, outer_steps=1, inner_steps=steps)
    rollout()  # warm-up (kernels, allocator)
    _, qcs_s, qcs_mem = _timed(
        lambda: QCSSelector(ro.train_fn, ro.eval_fn, qcs_cfg).fit(pool), device
    )
    sub = {k: v[:n_less] for k, v in pool.items()}

    def less():
        warm = less_warmup(model, sub, fraction=1.0, epochs=1, batch_size=batch, lr=1e-3, **lora)
        return less_features(warm, sub, kind="adam")

    feats, less_s, less_mem = _timed(less, device)
    norms = feats.norm(dim=-1)
    ok = bool(
        same_start
        and torch.isfinite(feats).all()
        and torch.allclose(norms, torch.ones_like(norms), atol=1e-4)
    )
    return {
        "model": name,
        "toy": toy,
        "seq_len": seq,
        "ok": ok,
        "rollout_same_start": same_start,
        "qcs_outer_step_s": qcs_s,
        "qcs_outer_step_peak_bytes": qcs_mem,
        "qcs_rollout_s": qcs_s / K,
        "less_features_s": less_s,
        "less_examples": n_less,
        "less_s_per_example_checkpoint": less_s / n_less,
        "less_peak_bytes": less_mem,
        "config": {"K": K, "rollout_steps": steps, "batch": batch},
    }


def unscaled_selection(device, toy: bool) -> dict:
    from qcs.experiment import QualityExperiment, QualitySize

    from neurips25_core.models import pretrained_tiny_llama, tiny_llama_config

    llama = (
        dict(hidden_size=32, num_layers=1, num_heads=2)
        if toy
        else dict(hidden_size=96, num_layers=4, num_heads=4)
    )
    base = pretrained_tiny_llama(
        config=tiny_llama_config(**llama),
        steps=30 if toy else 600,
        **({"batch_size": 4, "seq_len": 64} if toy else {}),
        progress=not toy,
    ).to(device)
    size = QualitySize(
        n_pool=50 if toy else 1000,
        n_val=8 if toy else 32,
        n_test=16 if toy else 1000,
        budgets=(0.05,) if not toy else (0.1,),
        arms=("random", "qcs"),
        seeds=(0,),
        cheap_seeds=(0,),
        outer_steps=2 if toy else 200,
        rollouts=4,
        rollout_steps=2 if toy else 20,
        final_steps=4 if toy else 100,
        batch_size=4 if toy else 16,
        max_new_bytes=8 if toy else 16,
    )
    exp = QualityExperiment(base, size)
    out = {}
    for arm in ("random", "qcs"):
        r, seconds, mem = _timed(lambda arm=arm: exp.run_arm(arm, size.budgets[0], 0), device)
        out[arm] = {
            "exact_match": r.exact_match,
            "test_loss": r.test_loss,
            "filler_kept": r.filler_share,
            "wrong_kept": r.wrong_share,
            "seconds_with_final_tune": seconds,
            "peak_bytes": mem,
        }
    out["ok"] = all(
        torch.isfinite(torch.tensor(v["test_loss"])) for v in out.values() if isinstance(v, dict)
    )
    out["size"] = {
        "outer": size.outer_steps,
        "K": size.rollouts,
        "steps": size.rollout_steps,
        "budget": size.budgets[0],
    }
    return out


def main(argv=None) -> int:
    from neurips25_core.bench import environment

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toy", action="store_true", help="tiny sizes (CPU without a GPU)")
    parser.add_argument("--out", default="qcs-gpu.json", help="JSON output path")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"qcs GPU benchmark on {device} ({'toy' if args.toy else 'full'} sizes)")
    start = time.perf_counter()
    names = ("pythia-160m",) if args.toy else ("pythia-160m", "pythia-410m")
    costs = []
    for name in names:
        print(f"1-2. {name}: correctness, one QCS outer step vs LESS features")
        costs.append(cost(name, device, args.toy))
        print(json.dumps(costs[-1]))
    print("3. unscaled selection (200 x 4 x 20, 5 %) vs random, same final tune")
    sel = unscaled_selection(device, args.toy)
    print(json.dumps(sel))
    result = {
        "env": environment(),
        "device": str(device),
        "toy": args.toy,
        "cost": costs,
        "selection": sel,
        "seconds": time.perf_counter() - start,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")
    return 0 if all(c["ok"] for c in costs) and sel["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
