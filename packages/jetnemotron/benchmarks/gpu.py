"""GPU measurements of jetnemotron (≤ 5 min on one H100/H200). Not run yet: no GPU was lent.

1. ``gated_delta_rule`` forward at Jet-Nemotron-2B shapes (H 12, d_k 96, d_v 256, T 4K–16K,
   bf16 inputs): our Triton kernels vs the torch chunked path vs fla's ``chunk_gated_delta_rule``
   (when ``flash-linear-attention`` is installed), outputs checked equal first.
2. Decode throughput of random-weight models: a Jet-Nemotron-2B-shaped hybrid (full attention at
   layers {14, 19}, SWA window 1152 at {20, 21}, JetBlock elsewhere) vs a Qwen2.5-1.5B-shaped
   model, after a prefill of 4K–32K tokens (the paper: 47× at 64K on H100 vs Qwen3-1.7B).

``--toy`` runs the same code at toy sizes on CPU (Triton under ``TRITON_INTERPRET=1``); the tests
run it so the script stays correct until a GPU run.

    python packages/jetnemotron/benchmarks/gpu.py            # on a GPU
    TRITON_INTERPRET=1 python packages/jetnemotron/benchmarks/gpu.py --toy
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial

import torch


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _time(fn, device, reps):
    fn()
    _sync(device)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def kernel_speed(device, toy: bool) -> list[dict]:
    from jetnemotron.ops import gated_delta_rule

    H, dk, dv = (2, 16, 32) if toy else (12, 96, 256)
    Ts = [40] if toy else [4096, 8192, 16384]
    C = 16 if toy else 64
    dtype = torch.float32 if toy else torch.bfloat16
    rows = []
    for T in Ts:
        g0 = torch.Generator(device="cpu").manual_seed(0)
        q, k = torch.randn(2, 1, T, H, dk, generator=g0).to(device, dtype).unbind(0)
        v = torch.randn(1, T, H, dv, generator=g0).to(device, dtype)
        g = (-torch.rand(1, T, H, generator=g0) * 0.1).to(device)
        beta = torch.rand(1, T, H, generator=g0).to(device)
        fns = {
            "triton": partial(gated_delta_rule, q, k, v, g, beta, chunk_size=C, backend="triton"),
            "torch": partial(gated_delta_rule, q, k, v, g, beta, chunk_size=C, backend="torch"),
        }
        # fla's kernels run on CPU only under the interpreter with test-only shims (its
        # autotuner benchmarks through a GPU driver): parity there is checked by
        # tests/test_jetnemotron_fla_parity.py, so --toy leaves fla out.
        if device.type == "cuda":
            try:
                from fla.ops.gated_delta_rule import chunk_gated_delta_rule

                fns["fla"] = partial(
                    chunk_gated_delta_rule, q, k, v, g, beta, use_qk_l2norm_in_kernel=True
                )
            except ImportError:
                pass
        ref = fns["torch"]()[0].float()
        row = {"T": T, "H": H, "d_k": dk, "d_v": dv, "dtype": str(dtype)}
        for name, fn in fns.items():
            out = fn()[0].float()
            row[f"{name}_rel_err"] = ((out - ref).norm() / ref.norm()).item()
            row[f"{name}_ms"] = 1e3 * _time(fn, device, 2 if toy else 10)
        rows.append(row)
    return rows


def _qwen_config(toy: bool):
    from transformers import Qwen2Config

    if toy:
        return Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                           attn_implementation="sdpa", use_cache=False)  # fmt: skip
    # Qwen2.5-1.5B's shapes
    return Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                       num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=65536,
                       tie_word_embeddings=True, attn_implementation="sdpa", use_cache=False)  # fmt: skip


def decode_speed(device, toy: bool) -> list[dict]:
    from jetnemotron.layers import JetBlock
    from jetnemotron.postnas import convert, greedy_generate, hybrid_cache
    from transformers import DynamicCache, Qwen2ForCausalLM

    cfg = _qwen_config(toy)
    dtype = torch.float32 if toy else torch.bfloat16
    torch.manual_seed(0)
    base = Qwen2ForCausalLM(cfg).to(device, dtype).eval()
    L = cfg.num_hidden_layers
    if toy:
        layout, window, (H, dk, dv) = [0, 1, "swa", 0], 8, (2, 16, 32)
    else:  # jetlm_2B: full at {14, 19}, SWA (1152) at {20, 21}
        layout = ["swa" if i in (20, 21) else int(i in (14, 19)) for i in range(L)]
        window, (H, dk, dv) = 1152, (12, 96, 256)
    hybrid = convert(
        base, layout, sliding_window=window,
        block_factory=lambda c, i: JetBlock(c.hidden_size, H, dk, dv, layer_idx=i, backend="triton"),
    ).to(device, dtype).eval()  # fmt: skip
    rows = []
    new = 4 if toy else 64
    for T in [16] if toy else [4096, 8192, 16384, 32768]:
        ids = torch.randint(0, cfg.vocab_size, (1, T), device=device)
        row = {"context": T, "new_tokens": new, "batch": 1}
        for name, model, make in (
            ("qwen2.5-1.5B-shaped", base, lambda: DynamicCache(config=base.config)),
            ("jet-nemotron-2B-shaped", hybrid, lambda m=hybrid: hybrid_cache(m)),
        ):
            with torch.no_grad():
                cache = make()
                model(input_ids=ids, cache=cache, use_cache=True)  # prefill (not timed)
                tok = ids[:, -1:]

                def step(model=model, cache=cache, tok=tok):
                    return model(input_ids=tok, cache=cache, use_cache=True)

                t = _time(step, device, new)
            row[f"{name}_tok_per_s"] = 1.0 / t
        row["ratio"] = (
            row["jet-nemotron-2B-shaped_tok_per_s"] / row["qwen2.5-1.5B-shaped_tok_per_s"]
        )
        rows.append(row)
        _ = greedy_generate  # the same decode path users call (prefill + greedy steps)
    return rows


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toy", action="store_true", help="toy sizes on CPU (Triton interpreter)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.toy else "cpu")
    if device.type != "cuda" and not args.toy:
        raise SystemExit("no GPU: run with --toy (and TRITON_INTERPRET=1) to check the script")
    results = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (toy)",
               "kernels": kernel_speed(device, args.toy), "decode": decode_speed(device, args.toy)}  # fmt: skip
    print(json.dumps(results, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
