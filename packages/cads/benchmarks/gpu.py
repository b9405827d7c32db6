"""GPU measurements for cads (issue 37): the solver-time ratio BudgetedPBCS / CADS per outer step.

* CADS-E vs ``BudgetedPBCS`` on a ResNet-18-sized CNN (four stages 64-128-256-512 of two 3x3
  convolution blocks, about 11M parameters) on synthetic 32x32 images, 10 classes;
* CADS-S vs ``BudgetedPBCS`` (source weights) on a random ~160M-parameter byte Llama (hidden 768,
  12 layers) on random byte windows from 8 sources.

Each solver runs ``--outer`` outer steps (K = 4, tau = 0.2) from the same generator; the ratio is
of the median per-step wall time (CUDA synchronised). ``--toy`` runs both at toy size on the CPU
(tested), which measures nothing about a GPU. GPU numbers are not measured yet (README).

    python packages/cads/benchmarks/gpu.py            # on a GPU (under 5 minutes on an H200)
    python packages/cads/benchmarks/gpu.py --toy      # seconds, CPU
"""

from __future__ import annotations

import argparse
import json
import statistics
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
    hidden, layers, seq, n = (16, 1, 16, 64) if toy else (768, 12, 256, 4096)
    steps, batch = (5, 4) if toy else (100, 16)
    config = tiny_llama_config(
        hidden_size=hidden, num_layers=layers, num_heads=4, max_position_embeddings=seq
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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toy", action="store_true", help="toy sizes on the CPU (tested)")
    parser.add_argument("--outer", type=int, default=None, help="outer steps per solver")
    args = parser.parse_args(argv)
    outer = args.outer if args.outer is not None else (2 if args.toy else 6)
    if outer < 1:
        parser.error("--outer must be >= 1")
    result = measure(args.toy, outer)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
