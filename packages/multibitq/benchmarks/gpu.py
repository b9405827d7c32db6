"""GPU measurement of the training-cost claim (one H200, <= 5 min): images/s per epoch.

Any-Precision's ResNet-20 (expand 5: 80/160/320 channels) on 50k synthetic 3x32x32 images, five
bit-widths {1, 2, 4, 8, 32}; one epoch each of Any-Precision (switchable BN, recursive
distillation, full data) and of ours at p = 0.5 and p = 0.8 (the epoch includes one scoring pass
of every child: ``warmup_epochs=0``, so this is the costliest epoch of a re-scoring cycle).
Correctness first: the converted model's forward on the device equals its CPU forward.

    python packages/multibitq/benchmarks/gpu.py --out gpu.json      # on a GPU machine
    python packages/multibitq/benchmarks/gpu.py --toy --out toy.json  # seconds, CPU or GPU
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from multibitq import MultiBitConfig, convert_, resnet_multibit, train_multibit, using_bits


def synthetic(n: int, size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    templates = torch.rand(10, 3, size, size, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    x = (templates[y] + 0.5 * torch.randn(n, 3, size, size, generator=g)).clamp(0, 1)
    return x, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toy", action="store_true", help="tiny sizes (seconds), any device")
    parser.add_argument("--out", default="gpu.json")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.toy:
        n, size, depth, width, bits, batch = 96, 8, 8, 4, (2, 32), 32
    else:
        n, size, depth, width, bits, batch = 50_000, 32, 20, 80, (1, 2, 4, 8, 32), 128
    x, y = synthetic(n, size)
    result = {"device": str(device), "toy": args.toy, "n": n, "bits": list(bits), "runs": []}
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name()

    # correctness first: the same converted model on the device and on the CPU
    cfg = MultiBitConfig(bits=bits)
    torch.manual_seed(0)
    cpu_model = convert_(resnet_multibit(depth, 3, 10, width), cfg).eval()
    dev_model = convert_(resnet_multibit(depth, 3, 10, width), cfg)
    dev_model.load_state_dict(cpu_model.state_dict())
    dev_model.to(device).eval()
    with torch.no_grad(), using_bits(cpu_model, 32), using_bits(dev_model, 32):
        a = cpu_model(x[:16])
        b = dev_model(x[:16].to(device)).cpu()
    err = float((a - b).norm() / a.norm())
    result["correctness"] = {"relative_error_32bit": err, "ok": err < 1e-3}
    if not result["correctness"]["ok"]:
        raise SystemExit(f"device forward differs from CPU: relative error {err}")

    runs = {
        "Any-Precision": ("anyprecision", dict(bn="switchable", correction="none")),
        "ours p=0.5": ("ours", dict(prune_rate=0.5)),
        "ours p=0.8": ("ours", dict(prune_rate=0.8)),
    }
    for name, (method, kwargs) in runs.items():
        cfg = MultiBitConfig(bits=bits, **kwargs)
        torch.manual_seed(0)
        model = convert_(resnet_multibit(depth, 3, 10, width), cfg).to(device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        hist = train_multibit(
            model, (x, y), cfg, method, epochs=1, batch_size=batch, warmup_epochs=0
        )
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        result["runs"].append(
            {
                "run": name,
                "epoch_seconds": seconds,
                "score_seconds": hist.score_seconds,
                "train_passes": hist.train_passes,
                "score_forwards": hist.score_forwards,
                "images_per_second": hist.train_passes / seconds,
            }
        )
    base = result["runs"][0]["epoch_seconds"]
    for r in result["runs"]:
        r["speedup_vs_anyprecision"] = base / r["epoch_seconds"]
    print(json.dumps(result, indent=1))
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
