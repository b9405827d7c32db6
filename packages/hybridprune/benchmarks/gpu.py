"""GPU benchmark for hybridprune: decode throughput of a Nemotron-H-8B-shaped model and its 4B shape.

Run on one CUDA GPU (about 5 minutes on an H200) from the repository root::

    uv run python packages/hybridprune/benchmarks/gpu.py --out gpu-results.json

No weights are downloaded: both models are built from configs with random bfloat16 weights
(decode speed does not depend on the values). The 8B shape is Nemotron-H-8B's (52 blocks: 24
Mamba2, 4 attention, 24 FFN; hidden 4096, FFN 21504, 128 Mamba2 heads × 64 in 8 groups, state
128; 32 query / 8 KV heads); the 4B shape is the paper's Minitron-SSM result (hidden 3072, FFN
12288, 112 Mamba2 heads = 14 per group, head_dim 64, depth unchanged). The block order here
spreads the 4 attention blocks evenly; the released model's order may differ.

For every batch size (1, 8, 32) each model prefills an 8K-token prompt, then decodes
``--new`` tokens one at a time with the hybrid cache; the decode tokens/s and the 4B/8B ratio
are reported (the paper: about 2x at 64K input / 1K output). transformers uses the mamba_ssm /
causal_conv1d kernels when they import and its torch path otherwise; the result says which. An
out-of-memory batch is reported as such, not skipped silently.

Pruning itself is indexing (no kernel); its correctness is tested on CPU (``uv run pytest
packages/hybridprune``). ``--toy`` runs tiny shapes on whatever device is present (the tests run
it on CPU).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch


def _pattern(n_mamba: int, n_attn: int) -> str:
    """``M-`` pairs with ``n_attn`` attention blocks spread evenly after a Mamba2 block."""
    every = max(1, n_mamba // n_attn)
    out = []
    for i in range(n_mamba):
        out.append("M")
        if (i + 1) % every == 0 and out.count("*") < n_attn:
            out.append("*")
        out.append("-")
    return "".join(out)


def configs(toy: bool) -> dict:
    from transformers import NemotronHConfig

    if toy:
        base = dict(
            hidden_size=64,
            intermediate_size=128,
            mamba_num_heads=8,
            mamba_head_dim=16,
            n_groups=2,
            ssm_state_size=16,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            hybrid_override_pattern=_pattern(4, 1),
        )
        small = dict(base, hidden_size=48, intermediate_size=96, mamba_num_heads=6)
    else:
        base = dict(
            hidden_size=4096,
            intermediate_size=21504,
            mamba_num_heads=128,
            mamba_head_dim=64,
            n_groups=8,
            ssm_state_size=128,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            hybrid_override_pattern=_pattern(24, 4),
        )
        small = dict(base, hidden_size=3072, intermediate_size=12288, mamba_num_heads=112)
    common = dict(
        vocab_size=131072 if not toy else 256,
        max_position_embeddings=1 << 17,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
        use_cache=True,
        tie_word_embeddings=False,
    )
    return {
        "8B-shaped": NemotronHConfig(**base, **common),
        "4B-shaped": NemotronHConfig(**small, **common),
    }


def build(config, device, dtype):
    """A model with random weights, built on the meta device then materialised (no CPU init)."""
    from transformers import NemotronHForCausalLM

    with torch.device("meta"):
        model = NemotronHForCausalLM(config)
    model = model.to_empty(device=device).to(dtype)
    g = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.rand(p.shape, generator=g, device=device) * 15 + 1))
            elif name.endswith(("dt_bias", "D")) or "norm" in name:
                p.fill_(1.0 if not name.endswith("dt_bias") else -4.0)
            elif p.ndim >= 2:
                p.normal_(0, 0.02, generator=g)
            else:
                p.zero_()
    for name, b in model.named_buffers():
        if b.is_meta:
            raise RuntimeError(f"build: buffer {name} was left on the meta device")
    return model.eval()


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def decode_speed(model, batch, prompt, new, device) -> dict:
    ids = torch.randint(3, model.config.vocab_size, (batch, prompt), device=device)
    with torch.no_grad():
        _sync(device)
        t0 = time.perf_counter()
        out = model(input_ids=ids, use_cache=True)
        _sync(device)
        t_prefill = time.perf_counter() - t0
        cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        tok = out.logits[:, -1:].argmax(-1)
        model(input_ids=tok, cache=cache, use_cache=True)  # warm-up step
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(new):
            tok = model(input_ids=tok, cache=cache, use_cache=True).logits[:, -1:].argmax(-1)
        _sync(device)
        t_decode = time.perf_counter() - t0
    if not torch.isfinite(out.logits).all():
        raise RuntimeError("decode_speed: non-finite logits")
    return {
        "batch": batch,
        "prompt": prompt,
        "new": new,
        "prefill_s": t_prefill,
        "decode_tokens_per_s": batch * new / t_decode,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--toy", action="store_true", help="tiny shapes on any device (the tests)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--prompt", type=int, default=None, help="prompt length (default 8192)")
    ap.add_argument("--new", type=int, default=None, help="decoded tokens (default 64)")
    ap.add_argument("--batches", default=None, help="comma-separated batch sizes (default 1,8,32)")
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not args.toy and device.type != "cuda":
        print("gpu.py: no CUDA device; run with --toy on CPU", file=sys.stderr)
        return 2
    dtype = torch.float32 if (args.toy and device.type == "cpu") else torch.bfloat16
    prompt = args.prompt or (32 if args.toy else 8192)
    new = args.new or (4 if args.toy else 64)
    batches = [int(b) for b in (args.batches or ("1,2" if args.toy else "1,8,32")).split(",")]
    try:
        import mamba_ssm  # noqa: F401

        backend = "mamba_ssm kernels"
    except ImportError:
        backend = "transformers torch path (mamba_ssm not installed)"
    from neurips25_core.bench import environment

    result = {"environment": environment(), "backend": backend, "dtype": str(dtype), "rows": []}
    print(f"device {device}, {dtype}, {backend}")
    for name, config in configs(args.toy).items():
        model = build(config, device, dtype)
        n = sum(p.numel() for p in model.parameters())
        for b in batches:
            try:
                row = decode_speed(model, b, prompt, new, device)
            except torch.OutOfMemoryError:
                row = {"batch": b, "prompt": prompt, "new": new, "oom": True}
                torch.cuda.empty_cache()
            row.update(model=name, params=n)
            result["rows"].append(row)
            print(json.dumps(row))
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    by = {(r["model"], r["batch"]): r for r in result["rows"]}
    for b in batches:
        big, small = by[("8B-shaped", b)], by[("4B-shaped", b)]
        if "decode_tokens_per_s" in big and "decode_tokens_per_s" in small:
            ratio = small["decode_tokens_per_s"] / big["decode_tokens_per_s"]
            result.setdefault("ratios", []).append({"batch": b, "decode_4b_over_8b": ratio})
            print(f"batch {b}: 4B/8B decode throughput {ratio:.2f}x")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
