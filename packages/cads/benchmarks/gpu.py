"""GPU measurements for cads (issue 37).

* Solver-time ratio BudgetedPBCS / CADS per outer step: CADS-E vs ``BudgetedPBCS`` on a
  ResNet-18-sized CNN (four stages 64-128-256-512 of two 3x3 convolution blocks, about 11M
  parameters) on synthetic 32x32 images, 10 classes; CADS-S vs ``BudgetedPBCS`` (source weights) on
  a random byte Llama (hidden 1024, 12 layers, MLP 2816: 154.7M parameters, ``params`` in the output) on
  random byte windows from 8 sources. Each solver runs ``--outer`` outer steps (K = 4, tau = 0.2)
  from the same generator; the ratio is of the median per-step wall time (CUDA synchronised).
* Language quality at B = 1600, seeds 0, 1, 2: ``bench.py``'s ``language_quality`` case at its
  ``full`` settings (``stdlib_families(per_source=128, val_windows=64, test_windows=256)``, the
  byte Llama of ``byte_llama_factory(seed)``, batch 8, 10 outer steps, 50 probe steps), every arm
  of ``LANGUAGE_ARMS`` (DSIR only when ``data-selection`` is installed) through the same
  ``select_language`` / ``deploy_language`` calls, data and models on the device; test and
  validation bits per byte per arm and seed, their mean, and wall seconds per arm. The seeds run
  in ``--language-workers`` concurrent processes (3 on a GPU: the tiny model is launch-bound, so
  one process leaves the GPU mostly idle); each arm's seconds are then measured under that sharing.
  ``--skip-language`` leaves it out.

``--toy`` runs everything at toy size on the CPU in one process (tested: B = 5, 2 outer steps,
1 seed, 4 sources of 2 windows each), which measures nothing about a GPU. GPU numbers are not measured yet
(README).

Time on an H200 -- an ESTIMATE, nothing here has run on a GPU. Ratio part: ~2,400 + ~500 steps of
the byte Llama (about 2 TFLOP each in fp32, ~50 ms) and ~4,800 + ~1,000 CNN steps (~5 ms): about
2.5-3 minutes. Language part: per seed 4 x 10 x 320 CADS-S probe steps + 34 sources x 50
best-single probe steps + 5 arms x 1,600 deployment steps, about 22,600 steps of a hidden-64
byte Llama at batch 8 x 64. Such a step costs 27 ms on one CPU core; on a GPU it is bound by
kernel launches (a few hundred per step), guessed at ~4 ms, so ~90 s per seed, ~1.5-2 minutes for
the 3 seeds in 3 concurrent processes (~4.5 minutes one after another). Whole script: about 4-5
minutes, at the limit; ``--skip-language`` (or running it alone after the ratio part) keeps each
run well inside it.

    python packages/cads/benchmarks/gpu.py            # on a GPU (~4-5 minutes on an H200, estimate)
    python packages/cads/benchmarks/gpu.py --skip-language
    python packages/cads/benchmarks/gpu.py --toy      # seconds, CPU
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from torch import nn


def _cnn(width: int, blocks: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, width, 3, padding=1), nn.ReLU()]
    channels = width
    for stage in range(4):
        out = width * 2**stage
        for b in range(blocks):
            stride = 2 if (b == 0 and stage > 0) else 1
            layers += [nn.Conv2d(channels, out, 3, stride=stride, padding=1), nn.ReLU()]
            channels = out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10)]
    return nn.Sequential(*layers)


def _factory(build, device):
    template = build().to(device)
    state = {k: v.clone() for k, v in template.state_dict().items()}

    def make() -> nn.Module:
        model = build().to(device)
        model.load_state_dict(state)
        return model

    return make


def _per_step(run) -> float:
    times: list[float] = []
    last = [time.perf_counter()]

    def callback(step, policy) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now

    run(callback)
    return statistics.median(times[1:] if len(times) > 1 else times)


def measure(toy: bool, outer: int) -> dict:
    from cads import BernoulliPolicy, Budget, BudgetedPBCS, CADSConfig, TrainingValue
    from cads.language import ByteLM, lm_loss
    from cads.policies import TruncatedGaussianPolicy
    from cads.solver import CADS

    from neurips25_core.models import tiny_llama, tiny_llama_config

    device = "cpu" if toy or not torch.cuda.is_available() else "cuda"
    g = torch.Generator().manual_seed(0)
    out: dict = {"device": device, "toy": toy}

    # CADS-E on the CNN
    n, steps, batch = (32, 5, 4) if toy else (2048, 200, 128)
    width, blocks = (4, 1) if toy else (64, 2)
    x = torch.randn(n, 3, 32, 32, generator=g).to(device)
    y = torch.randint(0, 10, (n,), generator=g).to(device)
    val = (x[: n // 8], y[: n // 8])
    make = _factory(lambda: _cnn(width, blocks), device)
    ce = nn.functional.cross_entropy
    budget = Budget(steps, batch)
    cads = _per_step(
        lambda cb: CADS(make, ce, (x, y), val, CADSConfig(budget, outer_steps=outer)).fit(
            torch.Generator().manual_seed(0), callback=cb
        )
    )
    pbcs = _per_step(
        lambda cb: BudgetedPBCS(
            TrainingValue(make, ce, (x, y), val, budget), BernoulliPolicy(n), outer, rollouts=4
        ).fit(torch.Generator().manual_seed(0), callback=cb)
    )
    out["cnn"] = {"n": n, "budget": steps, "cads_s": cads, "pbcs_s": pbcs, "ratio": pbcs / cads}

    # CADS-S on the Llama
    # not toy: hidden 1024 x 12 layers, MLP 2816, byte vocabulary = 154.7M parameters (the
    # issue's "~160M"); heads of 64 as in GPT-2-medium-sized models
    hidden, layers, seq, n = (16, 1, 16, 64) if toy else (1024, 12, 256, 4096)
    mlp, heads = (None, 4) if toy else (2816, 16)
    steps, batch = (5, 4) if toy else (100, 16)
    config = tiny_llama_config(
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        max_position_embeddings=seq,
        **({} if mlp is None else {"intermediate_size": mlp}),
    )
    make = _factory(lambda: ByteLM(tiny_llama(config, seed=0)), device)
    windows = torch.randint(0, 256, (n, seq + 1), generator=g).to(device)
    data = (windows[:, :-1], windows[:, 1:])
    val = (data[0][:16], data[1][:16])
    sources = (torch.arange(n) % 8).to(device)
    budget = Budget(steps, batch)
    cfg = CADSConfig(budget, outer_steps=outer, granularity="source")
    opt = lambda params: torch.optim.AdamW(params, lr=3e-4)  # noqa: E731
    cads = _per_step(
        lambda cb: CADS(make, lm_loss, data, val, cfg, sources=sources, optimizer_factory=opt).fit(
            torch.Generator().manual_seed(0), callback=cb
        )
    )
    value = TrainingValue(make, lm_loss, data, val, budget, optimizer_factory=opt, sources=sources)
    pbcs = _per_step(
        lambda cb: BudgetedPBCS(value, TruncatedGaussianPolicy(8), outer, rollouts=4).fit(
            torch.Generator().manual_seed(0), callback=cb
        )
    )
    params = sum(p.numel() for p in make().parameters())
    out["llama"] = {"params": params, "budget": steps, "cads_s": cads, "pbcs_s": pbcs}
    out["llama"]["ratio"] = pbcs / cads
    return out


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _language_settings(toy: bool) -> dict:
    """``bench.py``'s ``language_quality`` at its ``full`` size (B = 1600), or toy sizes."""
    if toy:
        return dict(
            per_source=2, val_windows=8, test_windows=16, budget=5, outer=2, probe=1, seeds=[0]
        )
    return dict(
        per_source=128,
        val_windows=64,
        test_windows=256,
        budget=1600,
        outer=10,
        probe=50,
        seeds=[0, 1, 2],
    )


def language_seed(toy: bool, device: str, seed: int) -> dict:
    """Every language arm at one seed: ``{arm: {"test_bpb", "val_bpb", "seconds"}}``.

    The data are ``stdlib_families``' (CPU) with the training windows, source ids and the
    validation/test pairs moved to ``device``; ``family_bytes`` stays on the CPU: the
    size-proportional weights are built from it and ``budgeted_train`` masks the source weights
    with a CPU tensor (``torch.where``), so weights on CUDA would not match. Models come from
    ``byte_llama_factory(seed)``'s template moved to ``device`` once and copied per call (the same
    initial weights). Arms that train nothing to select (uniform, size-proportional, DSIR) select
    on the CPU copy (DSIR turns every window into text); the CPU index/weight tensors they return
    then index the device tensors (indexing a CUDA tensor with CPU indices is allowed).
    """
    from cads.language import (
        LANGUAGE_ARMS,
        byte_llama_factory,
        deploy_language,
        select_language,
        stdlib_families,
    )

    from neurips25_core.dsir import dsir_available

    cfg = _language_settings(toy)
    batch = 8
    cpu_data = stdlib_families(
        per_source=cfg["per_source"],
        val_windows=cfg["val_windows"],
        test_windows=cfg["test_windows"],
    )
    if toy:  # the first 4 sources only: best-single trains one probe per source
        keep = cpu_data.sources < 4
        cpu_data = dataclasses.replace(
            cpu_data,
            x=cpu_data.x[keep],
            y=cpu_data.y[keep],
            sources=cpu_data.sources[keep],
            families=cpu_data.families[:4],
            family_bytes=cpu_data.family_bytes[:4],
        )
    data = dataclasses.replace(
        cpu_data,
        x=cpu_data.x.to(device),
        y=cpu_data.y.to(device),
        sources=cpu_data.sources.to(device),
        val=tuple(t.to(device) for t in cpu_data.val),
        test=tuple(t.to(device) for t in cpu_data.test),
    )
    template = byte_llama_factory(seed)().to(device)

    def factory() -> torch.nn.Module:
        return copy.deepcopy(template)

    arms = [a for a in LANGUAGE_ARMS if a != "dsir" or dsir_available()]
    out: dict = {}
    for arm in arms:
        trains = arm in ("best_single", "cads_s")
        _sync(device)
        start = time.perf_counter()
        weights = select_language(
            arm,
            factory,
            data if trains else cpu_data,
            cfg["budget"],
            batch,
            seed,
            cfg["outer"],
            cfg["probe"],
        )
        _sync(device)
        selected = time.perf_counter()
        row = deploy_language(factory, data, weights, cfg["budget"], batch, seed=10_000 + seed)
        _sync(device)
        done = time.perf_counter()
        out[arm] = {
            "test_bpb": row["test_bpb"],
            "val_bpb": row["val_bpb"],
            "seconds": done - start,
            "select_s": selected - start,
        }
    return out


def _language_worker(toy: bool, device: str, seed: int, workers: int) -> subprocess.Popen:
    # the workers share the cores (an OMP_NUM_THREADS already set is kept)
    env = {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // workers)), **os.environ}
    return subprocess.Popen(
        [sys.executable, __file__, "--language-seed", str(seed), "--device", device]
        + (["--toy"] if toy else []),
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def language(toy: bool, device: str, workers: int) -> dict:
    """The language arms at every seed (``workers`` > 1: one process per seed, at most
    ``workers`` at a time); per arm the per-seed bits per byte, their means and the seconds."""
    cfg = _language_settings(toy)
    per_seed: dict[int, dict] = {}
    start = time.perf_counter()
    if workers <= 1:
        for seed in cfg["seeds"]:
            per_seed[seed] = language_seed(toy, device, seed)
    else:
        pending = list(cfg["seeds"])
        while pending:
            batch, pending = pending[:workers], pending[workers:]
            procs = {seed: _language_worker(toy, device, seed, workers) for seed in batch}
            for seed, proc in procs.items():
                stdout, _ = proc.communicate()
                if proc.returncode:
                    raise RuntimeError(
                        f"language worker for seed {seed} failed ({proc.returncode})"
                    )
                per_seed[seed] = json.loads(stdout.strip().splitlines()[-1])
    arms: dict = {}
    for arm in per_seed[cfg["seeds"][0]]:
        rows = [per_seed[s][arm] for s in cfg["seeds"]]
        arms[arm] = {
            "test_bpb": [r["test_bpb"] for r in rows],
            "val_bpb": [r["val_bpb"] for r in rows],
            "test_bpb_mean": statistics.fmean(r["test_bpb"] for r in rows),
            "val_bpb_mean": statistics.fmean(r["val_bpb"] for r in rows),
            "seconds": [r["seconds"] for r in rows],
            "select_s": [r["select_s"] for r in rows],
        }
    return {
        "budget": cfg["budget"],
        "batch": 8,
        "outer": cfg["outer"],
        "probe_steps": cfg["probe"],
        "seeds": cfg["seeds"],
        "workers": max(1, min(workers, len(cfg["seeds"]))),
        "wall_s": time.perf_counter() - start,
        "arms": arms,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toy", action="store_true", help="toy sizes on the CPU (tested)")
    parser.add_argument("--outer", type=int, default=None, help="outer steps per solver")
    parser.add_argument("--skip-language", action="store_true", help="leave out language quality")
    parser.add_argument(
        "--language-workers",
        type=int,
        default=None,
        help="concurrent processes for the language seeds (default 3 on a GPU, 1 otherwise)",
    )
    parser.add_argument("--language-seed", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--device", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    device = "cpu" if args.toy or not torch.cuda.is_available() else "cuda"
    if args.language_seed is not None:  # a worker of language(): one seed, JSON on stdout
        result = language_seed(args.toy, args.device or device, args.language_seed)
        print(json.dumps(result))
        return result
    outer = args.outer if args.outer is not None else (2 if args.toy else 6)
    if outer < 1:
        parser.error("--outer must be >= 1")
    workers = args.language_workers
    if workers is None:
        workers = 3 if device == "cuda" else 1
    if workers < 1:
        parser.error("--language-workers must be >= 1")
    result = measure(args.toy, outer)
    if not args.skip_language:
        result["language"] = language(args.toy, device, workers)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
