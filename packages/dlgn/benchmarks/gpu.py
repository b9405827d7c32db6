"""GPU measurements of dlgn (one H200: under 5 minutes). ``--toy`` runs at toy size, on CPU under
``TRITON_INTERPRET=1`` too (that is how the tests run it).

1. Correctness: the Triton backend equals the torch backend (forward, grads, packed eval).
2. Speed: Triton vs torch ms per training step at B = 128, 95,232 input bits (CIFAR's 32-level
   thermometer), widths 256k and 1M, 5 layers, softmax and gumbel.
3. Time to a target discrete accuracy, DLGN (softmax) vs GLGN (gumbel), 256k neurons per layer on
   synthetic 2-XOR data (the paper's regime is >= 256k neurons per layer).

    uv run python packages/dlgn/benchmarks/gpu.py --out gpu.json
    TRITON_INTERPRET=1 uv run python packages/dlgn/benchmarks/gpu.py --toy --out toy.json
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _ms_per_step(net, x, y, device, warmup, iters):
    opt = torch.optim.Adam(net.parameters(), lr=0.01)

    def step():
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    _sync(device)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - t0)
    times.sort()
    return 1e3 * times[len(times) // 2]


def correctness(device, toy):
    from dlgn import LogicNet, logic_layer, pack_bits, packed_forward

    rows = []
    for batch, in_dim, out_dim in (
        [(7, 19, 23), (37, 33, 50)] if toy else [(128, 4096, 8192), (77, 3001, 5003)]
    ):
        g = torch.Generator().manual_seed(batch)
        x = torch.rand(batch, in_dim, generator=g).to(device).requires_grad_(True)
        ia = torch.randint(0, in_dim, (out_dim,), generator=g).to(device)
        ib = torch.randint(0, in_dim, (out_dim,), generator=g).to(device)
        w = (
            torch.softmax(3 * torch.randn(out_dim, 16, generator=g), -1)
            .to(device)
            .requires_grad_(True)
        )
        up = torch.randn(batch, out_dim, generator=g).to(device)
        outs = {}
        for backend in ("torch", "triton"):
            y = logic_layer(x, ia, ib, w, backend=backend)
            gx, gw = torch.autograd.grad((y * up).sum(), (x, w))
            outs[backend] = (y.detach(), gx, gw)
        errs = [
            ((a - b).norm() / b.norm().clamp_min(1e-30)).item()
            for a, b in zip(outs["triton"], outs["torch"])
        ]
        rows.append(
            {
                "what": f"layer B={batch} in={in_dim} out={out_dim}",
                "errors": errs,
                "ok": max(errs) < 1e-5,
            }
        )
    torch.manual_seed(0)
    net = LogicNet.from_widths(64, [96, 80], num_classes=4, connections="random").to(device).eval()
    for layer in net.logic_layers:
        layer.weight.data = torch.randn(layer.out_dim, 16, device=device) * 3
    xb = torch.randint(0, 2, (100, 64), device=device).float()
    packed = pack_bits(xb, 32)
    same = torch.equal(packed_forward(net, packed, backend="triton"), packed_forward(net, packed))
    rows.append({"what": "packed eval int32, B=100", "errors": [0.0 if same else 1.0], "ok": same})
    return rows


def speed(device, toy):
    from dlgn import LogicNet

    in_dim = 64 if toy else 95_232
    widths = [64] if toy else [256_000, 1_000_000]
    layers = 2 if toy else 5
    batch = 16 if toy else 128
    rows = []
    x = torch.randint(0, 2, (batch, in_dim), device=device).float()
    y = torch.randint(0, 8, (batch,), device=device)
    for width in widths:
        for mode in ("softmax", "gumbel"):
            row = {"width": width, "layers": layers, "batch": batch, "in_dim": in_dim, "mode": mode}
            for backend in ("torch", "triton"):
                torch.manual_seed(0)
                net = LogicNet.from_widths(
                    in_dim, [width] * layers, num_classes=8, tau=100.0, mode=mode, backend=backend
                ).to(device)
                row[f"{backend}_ms"] = _ms_per_step(
                    net, x, y, device, warmup=1 if toy else 3, iters=2 if toy else 10
                )
                del net
            row["speedup"] = row["torch_ms"] / row["triton_ms"]
            rows.append(row)
            print(row, flush=True)
    return rows


def time_to_target(device, toy):
    from dlgn import LogicNet
    from dlgn.data import two_xor
    from dlgn.train import noise_generator

    bits = 32
    width = 64 if toy else 256_000
    steps = 30 if toy else 3000
    target = 0.30 if toy else 0.95
    data = two_xor(2048 if toy else 65_536, 512 if toy else 4096, bits=bits, seed=0)
    x, yv = data["x_train"].to(device), data["y_train"].to(device)
    xt, yt = data["x_test"].to(device), data["y_test"].to(device)
    rows = []
    for mode in ("softmax", "gumbel"):
        torch.manual_seed(0)
        net = LogicNet.from_widths(
            bits,
            [width] * 3,
            num_classes=4,
            tau=30.0 if toy else 300.0,
            mode=mode,
            connections="random",  # 32 bits have only 496 distinct pairs for the unique wiring
            generator=noise_generator(1, device),
        ).to(device)
        opt = torch.optim.Adam(net.parameters(), lr=0.01)
        g = torch.Generator(device="cpu").manual_seed(0)
        seconds, reached, curve = 0.0, None, []
        for step in range(1, steps + 1):
            idx = torch.randint(0, len(x), (128,), generator=g).to(device)
            _sync(device)
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x[idx]), yv[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            _sync(device)
            seconds += time.perf_counter() - t0
            if step % (10 if toy else 100) == 0:
                net.eval()
                with torch.no_grad():
                    acc = (net(xt).argmax(-1) == yt).float().mean().item()
                net.train()
                curve.append({"step": step, "seconds": seconds, "discrete_acc": acc})
                if acc >= target and reached is None:
                    reached = {"step": step, "seconds": seconds}
                    break
        rows.append(
            {"mode": mode, "width": width, "target": target, "reached": reached, "curve": curve}
        )
        print(rows[-1]["mode"], reached, flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--toy", action="store_true", help="toy sizes (CPU, interpreter)")
    parser.add_argument("--out", default="gpu.json")
    args = parser.parse_args(argv)
    from neurips25_core.device import triton_usable

    if not triton_usable():
        raise SystemExit("needs a CUDA GPU, or TRITON_INTERPRET=1 with --toy")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and not args.toy:
        raise SystemExit("no GPU: run with --toy (and TRITON_INTERPRET=1)")
    result = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (interpreter)",
        "toy": args.toy,
        "torch": torch.__version__,
        "correctness": correctness(device, args.toy),
        "speed": speed(device, args.toy),
        "time_to_target": time_to_target(device, args.toy),
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
