"""GPU benchmark for xecomla: the absorbed-MLA decode kernel, and whole-model decode of 8B-shaped hybrids.

Run on a CUDA machine from the repository root::

    uv run python packages/xecomla/benchmarks/gpu.py --out gpu-results.json

``--toy`` runs tiny shapes (on CPU through the Triton interpreter when there is no GPU; the tests do
this so the script is known to work). What it measures now:

1. correctness: ``ops.mla_decode`` Triton (fp32 out) and torch vs the float64 reference on the 8B
   MLA shapes (32 heads, r_kv 160, d_rope 64), bf16 and fp32 caches;
2. one-token absorbed decode time, Triton vs torch (bf16 cache), over context length and batch;
3. ``--models``: random bf16 Llama-3.1-8B-shaped models — GQA (the teacher), MambaInLlama-50 %
   (GQA at the even layers, Mamba2 elsewhere) and Zebra-Llama-8B (MLA at the official
   [0, 4, 8, 12, 16, 20, 25, 30] with r_q 2048, r_kv 160, d_nope 64, d_rope 64, d_v 128, and 24
   Mamba2) — at each context T (4K/16K/32K): the largest batch whose cache fits beside the
   weights (doubling, then bisection, on out-of-memory), and decode tokens/s at that batch
   (batch / median one-token step). Caches are filled synthetically (a one-token prefill, then the
   attention/latent caches grown to T with random values): decode cost does not depend on them.
   Paper: Zebra-Llama 2.6-3.8x MambaInLlama's throughput (arXiv v1; 1.4-3.3x in the NeurIPS
   abstract).

Nothing here has run on a GPU yet (no device was lent); ``--toy`` (tests/test_bench.py) runs every
part at tiny shapes on CPU, with the batch search capped by ``--max-batch``.
"""

from __future__ import annotations

import argparse
import json
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from xecomla.ops import mla_decode

from neurips25_core.bench import environment, time_fn
from neurips25_core.testing import relative_error


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--toy", action="store_true", help="tiny shapes (CPU interpreter when no GPU)"
    )
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument(
        "--models", action="store_true", help="also the whole-model max batch and tokens/s"
    )
    parser.add_argument(
        "--max-batch", type=int, default=None, help="cap of the batch search (default: 4 on CPU)"
    )
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.toy:
        heads, r_kv, d_rope, lengths, batches = 3, 12, 4, [37], [2]
    else:
        heads, r_kv, d_rope, lengths, batches = 32, 160, 64, [4096, 16384, 32768], [1, 16]
    scale = (64 + d_rope) ** -0.5
    g = torch.Generator(device="cpu").manual_seed(0)
    result = {"environment": environment(), "device": device, "correctness": [], "speed": []}
    for dtype in (torch.float32, torch.bfloat16):
        B, S = batches[0], lengths[0]
        q = torch.randn(B, heads, r_kv, generator=g).to(device, dtype)
        qpe = torch.randn(B, heads, d_rope, generator=g).to(device, dtype)
        c = torch.randn(B, S, r_kv, generator=g).to(device, dtype)
        k = torch.randn(B, S, d_rope, generator=g).to(device, dtype)
        ref = mla_decode(q, qpe, c, k, scale, backend="reference")
        for backend in ("triton", "torch"):
            err = relative_error(
                mla_decode(q.float(), qpe.float(), c.float(), k.float(), scale, backend=backend),
                ref,
            )
            ok = err <= 1e-5
            result["correctness"].append(
                dict(backend=backend, dtype=str(dtype), S=S, rel_err=err, ok=ok)
            )
            print(f"correctness {backend:6s} {dtype}: rel err {err:.2e} {'ok' if ok else 'FAIL'}")
    for B in batches:
        for S in lengths:
            q = torch.randn(B, heads, r_kv, device=device, dtype=torch.bfloat16)
            qpe = torch.randn(B, heads, d_rope, device=device, dtype=torch.bfloat16)
            c = torch.randn(B, S, r_kv, device=device, dtype=torch.bfloat16)
            k = torch.randn(B, S, d_rope, device=device, dtype=torch.bfloat16)
            row = dict(B=B, S=S, heads=heads, r_kv=r_kv, d_rope=d_rope)
            for backend in ("triton", "torch"):
                t = time_fn(
                    lambda b=backend, args=(q, qpe, c, k): mla_decode(*args, scale, backend=b),
                    min_time=0.05 if args.toy else 0.5,
                )
                row[f"{backend}_ms"] = t.median * 1e3
            result["speed"].append(row)
            print(
                f"decode B={B} S={S}: triton {row['triton_ms']:.3f} ms, torch {row['torch_ms']:.3f} ms"
            )
    if args.models:
        result["models"] = model_throughput(args.toy, device, args.max_batch)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return result


def _shapes(toy: bool):
    """(LlamaConfig, MLAConfig, Zebra's MLA layers, context lengths)."""
    from transformers import LlamaConfig
    from xecomla import MLAConfig

    if toy:
        cfg = LlamaConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=256, max_position_embeddings=256,
        )  # fmt: skip
        return cfg, MLAConfig(48, 16, 8, 8, 16), [0, 2], [48]
    cfg = LlamaConfig(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
        rope_theta=500000.0,
    )  # fmt: skip
    return (
        cfg,
        MLAConfig(r_q=2048, r_kv=160, d_nope=64, d_rope=64, d_v=128),
        [0, 4, 8, 12, 16, 20, 25, 30],
        [4096, 16384, 32768],
    )


def _build(arm: str, teacher, mla_cfg, mla_layers, device):
    import xecomla

    L = teacher.config.num_hidden_layers
    if arm == "gqa":
        model = teacher
    elif arm == "mambainllama50":
        model = xecomla.compose(
            teacher, mla_layers=[], mla_config=None, gqa_layers=list(range(0, L, 2)),
            mamba_init="random",
        )  # fmt: skip
    else:
        model = xecomla.compose(
            teacher, mla_layers=mla_layers, mla_config=mla_cfg, mla_init="random",
            mamba_init="random",
        )  # fmt: skip
    return model.to(device=device, dtype=torch.bfloat16).eval()


def _filled_cache(model, B: int, T: int, device):
    """A cache holding T tokens per sequence: a one-token prefill, then attention/latent caches grown
    to T with random values (Mamba2 states are constant size)."""
    import xecomla
    from transformers import DynamicCache
    from transformers.cache_utils import LinearAttentionLayer

    hybrid = hasattr(model, "hybrid_layout")
    cache = xecomla.hybrid_cache(model) if hybrid else DynamicCache()
    ids = torch.zeros(B, 1, dtype=torch.long, device=device)
    with torch.no_grad():
        model(input_ids=ids, cache=cache, use_cache=True)
        for layer in cache.layers:
            if isinstance(layer, LinearAttentionLayer):
                continue
            k, v = layer.keys, layer.values
            layer.keys = torch.randn(*k.shape[:-2], T, k.shape[-1], dtype=k.dtype, device=device)
            layer.values = torch.randn(*v.shape[:-2], T, v.shape[-1], dtype=v.dtype, device=device)
    return cache


def _decode_fn(model, cache, B: int, device):
    ids = torch.zeros(B, 1, dtype=torch.long, device=device)
    from transformers.cache_utils import LinearAttentionLayer

    def step():
        with torch.no_grad():
            out = model(input_ids=ids, cache=cache, use_cache=True).logits
        for layer in cache.layers:  # back to T tokens: every call decodes at the same length
            if not isinstance(layer, LinearAttentionLayer):
                layer.crop(-1)
        return out

    return step


def _fits(model, B: int, T: int, device) -> bool:
    try:
        cache = _filled_cache(model, B, T, device)
        _decode_fn(model, cache, B, device)()
        return True
    except torch.OutOfMemoryError:
        return False
    finally:
        cache = None
        if device == "cuda":
            torch.cuda.empty_cache()


def _max_batch(model, T: int, device, cap: int) -> int:
    lo, hi = 0, 1
    while hi <= cap and _fits(model, hi, T, device):
        lo, hi = hi, hi * 2
    hi = min(hi, cap + 1)
    while hi - lo > 1:  # lo fits, hi does not (or is past the cap)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _fits(model, mid, T, device) else (lo, mid)
    return lo


def model_throughput(toy: bool, device: str, max_batch: int | None) -> list[dict]:
    """Max batch and decode tokens/s per arm and context length (see the module docstring)."""
    from transformers import LlamaForCausalLM

    cfg, mla_cfg, mla_layers, lengths = _shapes(toy)
    cap = max_batch or (4 if device == "cpu" else 4096)
    torch.manual_seed(0)
    with torch.device("cpu"):
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            teacher = LlamaForCausalLM(
                cfg
            ).eval()  # built on CPU; each arm moves to the device alone
        finally:
            torch.set_default_dtype(previous)
    rows = []
    for arm in ("gqa", "mambainllama50", "zebra"):
        model = _build(arm, teacher, mla_cfg, mla_layers, device)
        for T in lengths:
            B = _max_batch(model, T, device, cap)
            row = dict(arm=arm, T=T, max_batch=B)
            if B:
                cache = _filled_cache(model, B, T, device)
                t = time_fn(_decode_fn(model, cache, B, device), min_time=0.05 if toy else 1.0)
                row.update(step_ms=t.median * 1e3, tokens_per_s=B / t.median)
                cache = None
            rows.append(row)
            print(f"model {arm:15s} T={T}: max batch {B}, {row.get('tokens_per_s', 0):.1f} tok/s")
        if arm != "gqa":
            model = None
        else:
            teacher = teacher.to("cpu")
        if device == "cuda":
            torch.cuda.empty_cache()
    for row in rows:
        ref = next(r for r in rows if r["arm"] == "mambainllama50" and r["T"] == row["T"])
        if ref.get("tokens_per_s") and row.get("tokens_per_s"):
            row["throughput_vs_mambainllama50"] = row["tokens_per_s"] / ref["tokens_per_s"]
    return rows


if __name__ == "__main__":
    main()
