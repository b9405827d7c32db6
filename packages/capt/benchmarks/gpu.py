"""GPU benchmark for capt: step time, memory and generation speed per arm, then the spec's T1 run.

Run on one CUDA GPU (an H100/H200, under 5 minutes) from the repository root, with peft::

    uv sync --all-packages --extra peers
    uv run python packages/capt/benchmarks/gpu.py --out capt-gpu.json

``--toy`` runs tiny shapes on whatever device there is (the CPU without a GPU; a test does this so
the script is known to work). capt has no Triton kernel, so nothing needs the interpreter.

1. ``speed``: a Llama-3.2-1B-shaped model from its config (random weights, bf16; hidden 2048,
   16 layers, 32 heads, 8 KV heads, vocabulary 128,256), batch 8 × 512. Per arm, one training step
   (forward, backward, AdamW on the adapter) and its peak memory: CaPT, peft PT(100) and peft
   LoRA (r = 8 on ``q_proj, v_proj``); our PT(100) is checked against peft's with the same
   prompts first (bf16 tolerance). Then greedy generation with the KV cache (64 new tokens after
   the 512-token prompt), CaPT against the bare model: prefill and decode tokens/s.
2. ``t1``: the spec's 1,500-step T1 run on the width-128 byte Llama (:mod:`capt.quality`, the
   quality case's base), CaPT, peft PT(20) and peft LoRA(4), one seed, the default learning rates.

GPU numbers are not measured in this repository yet (no GPU was lent); see the README.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from neurips25_core.bench import environment, peak_live_bytes, peak_memory_cuda, time_fn
from neurips25_core.models import benchmark_llama


def _llama(toy: bool, device, dtype):
    model = benchmark_llama(toy, device, dtype)  # Llama-3.2-1B's shape, random weights
    torch.manual_seed(0)  # the adapters built next draw their initialisation from the global RNG
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def speed(toy: bool, device: torch.device) -> dict:
    import capt
    import peft

    from neurips25_core.testing import assert_close

    dtype = torch.float32 if toy else torch.bfloat16
    batch, seq, new = (2, 32, 4) if toy else (8, 512, 64)
    n_pt = 8 if toy else 100
    vocab = 260 if toy else 128_256
    ids = torch.randint(3, vocab, (batch, seq), generator=torch.Generator().manual_seed(1))
    ids = ids.to(device)
    labels = ids.clone()
    labels[:, : seq // 2] = -100
    arms = {
        "capt": capt.get_peft_model(_llama(toy, device, dtype), capt.CapsuleConfig(init="normal")),
        f"peft_pt{n_pt}": peft.get_peft_model(
            _llama(toy, device, dtype),
            peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=n_pt),
        ),
        "peft_lora8": peft.get_peft_model(
            _llama(toy, device, dtype),
            peft.LoraConfig(task_type="CAUSAL_LM", r=8, target_modules=["q_proj", "v_proj"]),
        ),
    }
    ours_pt = capt.get_peft_model(_llama(toy, device, dtype), capt.PromptTuning(n_pt))
    with torch.no_grad():
        arms[f"peft_pt{n_pt}"].prompt_encoder["default"].embedding.weight.copy_(ours_pt.capsules[0])
        assert_close(
            ours_pt(input_ids=ids).logits.float(),
            arms[f"peft_pt{n_pt}"](input_ids=ids).logits.float(),
            rtol=1e-5 if toy else 1.6e-2,
            name=f"our PT({n_pt}) vs peft PT({n_pt})",
        )
    del ours_pt
    out: dict = {"batch": batch, "seq": seq, "dtype": str(dtype), "arms": {}}
    for name, model in arms.items():
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-3)
        model.train()

        def step(model=model, opt=opt):
            model(input_ids=ids, labels=labels).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()
        timing = time_fn(step, device=device, min_time=0.05 if toy else 1.0)
        memory = peak_memory_cuda(step) if device.type == "cuda" else peak_live_bytes(step)
        out["arms"][name] = {
            "step_seconds": timing.median,
            "tokens_per_s": batch * seq / timing.median,
            "peak_bytes": memory,
            "trainable": sum(p.numel() for p in params),
        }
        model.eval()
        print(f"speed {name}: {out['arms'][name]}", flush=True)
    # Generation: CaPT (slot written on the prefill pass only) against the bare model.
    bare = _llama(toy, device, dtype)
    capsule = arms["capt"]
    gen = {}
    for name, fn in (
        ("bare", lambda n: bare.generate(input_ids=ids, max_new_tokens=n, do_sample=False)),
        ("capt", lambda n: capsule.generate(input_ids=ids, max_new_tokens=n, do_sample=False)),
    ):
        with torch.no_grad():
            prefill = time_fn(lambda fn=fn: fn(1), device=device, min_time=0.05 if toy else 0.5)
            full = time_fn(lambda fn=fn: fn(new), device=device, min_time=0.05 if toy else 1.0)
        decode = max(full.median - prefill.median, 1e-9)
        gen[name] = {
            "prefill_tokens_per_s": batch * seq / prefill.median,
            "decode_tokens_per_s": batch * (new - 1) / decode,
        }
        print(f"generate {name}: {gen[name]}", flush=True)
    out["generate"] = gen
    return out


def t1(toy: bool, device: torch.device) -> dict:
    from capt import quality
    from capt.tasks import make_task

    steps, n_test = (3, 16) if toy else (1500, 1000)
    base = quality.pretrained_base("smoke" if toy else "full", progress=False)
    ids, labels, task = make_task("T1", 32 if toy else 1000, "train", seed=0)
    test_ids, test_labels, _ = make_task("T1", n_test, "test", seed=2)
    out = {"steps": steps, "arms": {}}
    for arm, lr in (("capt", 1e-2), ("peft_pt20", 1e-2), ("peft_lora4", 1e-3)):
        model = quality.build_arm(arm, base, seed=0).to(device)
        info = quality.fit(model, ids, labels, task, steps, lr, seed=0)
        info["test_accuracy"] = quality.accuracy(model, test_ids, test_labels, task)
        out["arms"][arm] = {"lr": lr, **info}
        print(f"t1 {arm}: {out['arms'][arm]}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toy", action="store_true", help="tiny shapes on any device (tests)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if not args.toy and not torch.cuda.is_available():
        print("gpu.py: no CUDA device; run with --toy for the tiny CPU check", file=sys.stderr)
        return 2
    try:
        import peft  # noqa: F401
    except ImportError:
        print("gpu.py: needs peft (uv sync --all-packages --extra peers)", file=sys.stderr)
        return 2
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    start = time.perf_counter()
    results = {"environment": environment(), "toy": args.toy, "device": str(device)}
    results["speed"] = speed(args.toy, device)
    results["t1"] = t1(args.toy, device)
    results["seconds"] = time.perf_counter() - start
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(results, handle, indent=1, default=str)
    print(f"gpu.py: done in {results['seconds']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
