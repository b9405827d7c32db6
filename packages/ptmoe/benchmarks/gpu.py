"""GPU benchmark for ptmoe: step time, memory and generation speed per arm, then a QA run.

Run on a CUDA machine (one H100/H200, under 5 minutes) from the repository root, with peft::

    uv sync --all-packages --extra peers
    uv run python packages/ptmoe/benchmarks/gpu.py --out gpu-results.json

``--toy`` runs tiny shapes on whatever device there is (CPU without a GPU; the tests do this so
the script is known to work). There is no Triton kernel in ptmoe, so nothing needs the interpreter.

1. ``speed``: a Llama-3.2-1B-shaped model from its config (random weights, bf16; hidden 2048,
   16 layers, 32 heads, 8 KV heads, vocabulary 128,256), batch 8 × 512. Per arm: one training
   step (forward, backward, AdamW on the adapter), peak memory of the step, and greedy
   generation tokens/s (32 new tokens after 128). Arms: PT (T = 40), PT-MoE (N = 2, R = 36, the
   spec's 80k budget), SMoP (2 × 20), peft PT (40) and peft LoRA (r = 1 on q_proj, v_proj). Our
   PT's logits are checked against peft's PT with the same prompt before anything is timed.
2. ``qa``: the spec's hidden-256, 4-layer base pretrained on the mixed corpus, then the QA task
   for PT-MoE, PT and peft LoRA (2,000 steps, batch 16, one seed, the spec's learning rates),
   scored by SQuAD F1/EM in and out of domain.

GPU numbers are not measured in this repository yet (no GPU was available); see the README.
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
    return model


def _arms(toy: bool, device, dtype):
    import ptmoe

    T = 8 if toy else 40
    arms = {}
    base = _llama(toy, device, dtype)
    emb = base.get_input_embeddings()
    arms["pt"] = ptmoe.apply_prompt(base, ptmoe.PromptTuning(emb, T))
    base = _llama(toy, device, dtype)
    rank = 6 if toy else 36
    arms["ptmoe"] = ptmoe.get_peft_model(
        base, ptmoe.PTMoEConfig(prompt_length=T, num_experts=2, rank=rank)
    )
    base = _llama(toy, device, dtype)
    arms["smop"] = ptmoe.apply_prompt(base, ptmoe.SMoP(base.get_input_embeddings(), 2, T // 2))
    try:
        import peft
    except ImportError:
        print("peft not installed (install the 'peers' extra): skipping peft PT and LoRA")
        return arms
    arms["peft_pt"] = peft.get_peft_model(
        _llama(toy, device, dtype),
        peft.PromptTuningConfig(
            task_type="CAUSAL_LM", num_virtual_tokens=T, prompt_tuning_init="SAMPLE_VOCAB"
        ),
    )
    arms["peft_lora"] = peft.get_peft_model(
        _llama(toy, device, dtype),
        peft.LoraConfig(task_type="CAUSAL_LM", r=1, target_modules=["q_proj", "v_proj"]),
    )
    return arms


def speed(toy: bool, device) -> list[dict]:
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    batch, seq, prefix, new = (2, 32, 16, 4) if toy else (8, 512, 128, 32)
    arms = _arms(toy, device, dtype)
    vocab = arms["pt"].base_model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, vocab, (batch, seq), generator=g).to(device)
    labels = ids.clone()
    labels[:, : seq // 2] = -100
    if "peft_pt" in arms:
        with torch.no_grad():
            arms["peft_pt"].prompt_encoder["default"].embedding.weight.copy_(
                arms["pt"].prompt_encoder.prompt
            )
            ours = arms["pt"](input_ids=ids).logits.float()
            theirs = arms["peft_pt"](input_ids=ids).logits.float()
        err = float((ours - theirs).norm() / theirs.norm())
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        if not err <= tol:
            raise AssertionError(f"our PT and peft PT differ: relative error {err:.2e} > {tol}")
        print(f"our PT = peft PT with the same prompt (relative error {err:.1e})")
    rows = []
    for name, model in arms.items():
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-3)
        model.train()

        def step(model=model, opt=opt):
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step_s = time_fn(step, min_time=0.02 if toy else 2.0).median
        memory = peak_memory_cuda(step) if device.type == "cuda" else peak_live_bytes(step)
        model.eval()

        def generate(model=model):
            with torch.no_grad():
                return model.generate(
                    input_ids=ids[:, :prefix],
                    max_new_tokens=new,
                    min_new_tokens=new,
                    do_sample=False,
                    pad_token_id=0,
                )

        gen_s = time_fn(generate, min_time=0.02 if toy else 2.0).median
        row = {
            "section": "speed",
            "arm": name,
            "trainable": sum(p.numel() for p in params),
            "batch": batch,
            "seq": seq,
            "dtype": str(dtype),
            "step_s": step_s,
            "tokens_per_s": batch * seq / step_s,
            "peak_memory_bytes": memory,
            "generate_tokens_per_s": batch * new / gen_s,
        }
        print(json.dumps(row))
        rows.append(row)
        del opt
    return rows


def qa_run(toy: bool, device) -> list[dict]:
    from ptmoe import quality
    from ptmoe.tasks import IN_DOMAIN, OUT_OF_DOMAIN, qa_examples

    from neurips25_core.models import (
        cached_checkpoint,
        tiny_llama,
        tiny_llama_config,
        train,
        train_arguments,
    )

    if toy:
        config = tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2)
        corpus = quality.mixed_corpus(100_000, 100_000)
        pre, steps, n_eval, batch = dict(steps=5, batch_size=4, seq_len=64), 3, 6, 4
    else:
        config = tiny_llama_config(
            hidden_size=256, num_layers=4, num_heads=4, intermediate_size=1024
        )
        corpus = quality.mixed_corpus(4_000_000, 12_000_000)
        pre, steps, n_eval, batch = dict(steps=3000, batch_size=32, seq_len=256), 2000, 192, 16

    def build():
        model = tiny_llama(config).to(device)
        result = train(model, corpus, progress=False, **pre)
        return {k: v.cpu() for k, v in model.state_dict().items()}, {"seconds": result.seconds}

    state, meta = cached_checkpoint(
        "ptmoe_gpu_base",
        {"config": config, "data": corpus.fingerprint, "train": train_arguments(**pre), "seed": 0},
        build,
    )

    def fresh():
        model = tiny_llama(config)
        model.load_state_dict(state)
        return model.to(device).eval()

    train_set = qa_examples(list(IN_DOMAIN), 4000 if not toy else 32, seed=1)
    eval_sets = {
        "in_domain": qa_examples(list(IN_DOMAIN), n_eval, seed=3),
        "out_of_domain": qa_examples(list(OUT_OF_DOMAIN), n_eval, seed=4),
    }
    arms = ["ptmoe", "pt"]
    try:
        import peft  # noqa: F401

        arms.append("peft_lora")
    except ImportError:
        print("peft not installed: skipping the LoRA arm of the QA run")
    rows = []
    for arm in arms:
        lr = 3e-3 if arm == "peft_lora" else 3e-2
        r = quality.run_arm(
            arm, fresh, "qa", train_set, eval_sets, steps, lr, batch_size=batch, max_new_tokens=12
        )
        row = {
            "section": "qa",
            "arm": arm,
            "lr": lr,
            "steps": steps,
            "base_pretrain_seconds": meta.get("seconds"),
            **{f"{s}_{m}": v["all"][m] for s, v in r["scores"].items() for m in v["all"]},
            "trainable": r["info"]["trainable"],
            "seconds": r["seconds"],
        }
        print(json.dumps(row))
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toy", action="store_true", help="tiny shapes (CPU without a GPU)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--skip-qa", action="store_true", help="only the speed section")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and not args.toy:
        print("no GPU: run with --toy on CPU", file=sys.stderr)
        raise SystemExit(2)
    start = time.perf_counter()
    rows = speed(args.toy, device)
    if not args.skip_qa:
        rows += qa_run(args.toy, device)
    result = {
        "environment": environment(),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "toy": args.toy,
        "rows": rows,
        "seconds": time.perf_counter() - start,
    }
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)
    return result


if __name__ == "__main__":
    main()
