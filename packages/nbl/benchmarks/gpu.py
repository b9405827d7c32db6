"""GPU measurements for NBL: a Llama-3-8B-shaped model with random bf16 weights (no download).

Correctness first (the NBL map equals ``F.linear`` in float64 at toy size; cached greedy decode
equals no-cache recompute with layer 0 replaced), then prefill + greedy decode tokens/s and peak
memory for the original model, NBL-8 and NBL-12 (scaled to ``--layers``), batch 1 and 8. The
replaced layers get random ``W`` (speed does not depend on the values). ``--toy`` runs a tiny
fp32 model on CPU for the test suite.

    python packages/nbl/benchmarks/gpu.py --out gpu.json            # on a GPU
    python packages/nbl/benchmarks/gpu.py --toy --out toy.json      # CPU smoke
"""

from __future__ import annotations

import argparse
import json
import time

import nbl
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def build(toy: bool, layers: int, device, dtype):
    if toy:
        cfg = LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=256,
            max_position_embeddings=512,
        )
    else:
        cfg = LlamaConfig(
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=layers,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=128256,
            max_position_embeddings=8192,
            rope_theta=500000.0,
        )
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype).eval()
    return cfg, model


def replace(model, k: int):
    d = model.config.hidden_size
    ref = model.model.layers[0].self_attn.o_proj.weight
    for i in range(k):  # the first k layers: speed does not depend on which
        lay = model.model.layers[i]
        w = torch.randn(d, d, device=ref.device, dtype=torch.float32) / d**0.5
        lay.self_attn = nbl.LinearizedAttention(
            w.to(ref.dtype), torch.zeros(d, device=ref.device, dtype=ref.dtype), i
        )
        lay.input_layernorm = torch.nn.Identity()
    return model


def correctness(device) -> list[dict]:
    out = []
    w = torch.randn(48, 48, dtype=torch.float64, device=device)
    b = torch.randn(48, dtype=torch.float64, device=device)
    h = torch.randn(2, 5, 48, dtype=torch.float64, device=device)
    got = nbl.LinearizedAttention(w, b, 0)(h)[0]
    err = float((got - torch.nn.functional.linear(h, w, b)).norm() / got.norm())
    out.append(
        {"check": "LinearizedAttention vs F.linear (fp64)", "rel_err": err, "ok": err < 1e-12}
    )
    _, model = build(True, 4, device, torch.float64)
    replace(model, 2)
    prompt = torch.randint(0, 256, (2, 7), device=device)
    with torch.no_grad():
        gen = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=6,
            do_sample=False,
            pad_token_id=0,
        )
        seq = prompt
        for _ in range(6):
            seq = torch.cat([seq, model(seq).logits[:, -1].argmax(-1, keepdim=True)], 1)
    out.append(
        {
            "check": "cached generate == recompute (layer 0 replaced)",
            "ok": bool(torch.equal(gen, seq)),
        }
    )
    return out


def timed_generate(model, batch, prompt_len, new, device):
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt_len), device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.no_grad():
        model(ids[:, :8])  # warm-up
        sync()
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        out = model(ids, use_cache=True)
        sync()
        t1 = time.perf_counter()
        cache, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        steps = []
        for _ in range(new):
            s = time.perf_counter()
            o = model(nxt, past_key_values=cache, use_cache=True)
            cache, nxt = o.past_key_values, o.logits[:, -1:].argmax(-1)
            sync()
            steps.append(time.perf_counter() - s)
    steps.sort()
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
    return {
        "prefill_tokens_per_s": batch * prompt_len / (t1 - t0),
        "decode_tokens_per_s": batch / steps[len(steps) // 2],
        "peak_bytes": peak,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--toy", action="store_true")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--out", default="gpu.json")
    args = ap.parse_args()
    device = "cpu" if args.toy or not torch.cuda.is_available() else "cuda"
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    result = {"device": device, "correctness": correctness(device), "speed": []}
    if not all(r["ok"] for r in result["correctness"]):
        raise SystemExit(f"correctness failed: {result['correctness']}")
    n = 4 if args.toy else args.layers
    prompt_len, new = (32, 8) if args.toy else (2048, 256)
    for k in (0, round(n * 8 / 32), round(n * 12 / 32)):
        _, model = build(args.toy, args.layers, device, dtype)
        replace(model, k)
        for batch in (1, 8):
            r = timed_generate(model, batch, prompt_len, new, device)
            result["speed"].append({"replaced": k, "layers": n, "batch": batch, **r})
            print(result["speed"][-1], flush=True)
        del model
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
