"""The dlgn benchmark suite (``neurips25 bench dlgn``).

Quality (the reduced reproduction, real training on offline data):

* ``digits_gap``: scikit-learn's bundled digits, thermometer thresholds {4, 8, 12} → 192 bits,
  80/20 split. ``xor_gap``: synthetic 2-XOR on 32 uniform bits (8192 train / 2048 test).
* Net: 3 × 4000 neurons, ``unique`` wiring (2-XOR: the first layer ``random``, since 32 bits
  have only 496 distinct pairs), GroupSum τ = 30, Adam 0.01, batch 100.
* Arms: GLGN (``mode="gumbel"``, τ_g = 1), DLGN (``mode="softmax"``, the baseline), the
  ``torchlogix`` peer (its default raw/soft DLGN layer), and the ``hard_st`` ablation, in every
  mode. ``--quick``: 3 × 500 neurons, 1 seed, 600 steps (2-XOR: 4096 train / 1024 test).
  ``--full``: 3 × 4000 neurons, 3 seeds, 3000 steps.
* Logged every 250 steps on the test split: discrete accuracy, train-mode accuracy, the gap,
  the unused fraction, mean max softmax(z), training wall-clock. The packed (int64 bitwise)
  accuracy is checked equal to the discrete accuracy at the end of every run.

Speed (CPU, one thread):

* ``train_step_speed``: ms per training step at B = 128, 4 layers of width 16k (full: 16k and
  64k), softmax (DLGN, baseline) vs gumbel (GLGN) vs the torchlogix peer (outputs checked equal
  to ours first on shared wiring and logits).
* ``eval_speed``: samples/s of the discretized net, packed int64 bitwise vs float eval.

Every case also runs at a smoke size (2 × 64 neurons, 20 steps).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import statistics
import sys
import types
from collections.abc import Callable

import torch
from torch import nn

from neurips25_core.bench import Context, Suite, compare, plot_lines, single_thread

SUITE = Suite(
    name="dlgn",
    paper="Mind the Gap: Removing the Discretization Gap in Differentiable Logic Gate Networks",
    url="https://arxiv.org/abs/2506.07500",
)

PEER_MISSING = (
    "torchlogix is not installed: the torchlogix arm is skipped (install the peers extra, e.g. "
    "`uv pip install --no-deps torchlogix==0.2.2`)"
)


# The quick reduction (every arm, both datasets, one seed, under a minute on two cores): the
# full run's 3 x 4000 neurons and 3000 steps shrink to these.
QUICK_WIDTH = 500
QUICK_STEPS = 600

# ----------------------------------------------------------------------------- the peer


def import_torchlogix_layers():
    """``torchlogix.layers`` or None when torchlogix is absent.

    torchlogix 0.2.2 declares Python ≥ 3.10, but its ``circuit.py`` (an export tool imported by the
    package ``__init__``) uses Python 3.12 f-string syntax and raises SyntaxError on 3.11. Its
    layers do not need it, so on 3.11 the package is registered without running ``__init__``.
    """
    spec = importlib.util.find_spec("torchlogix")
    if spec is None:
        return None
    # An optional peer (the ``peers`` extra): imported by name, never a hard dependency.
    try:
        return importlib.import_module("torchlogix.layers")
    except SyntaxError:
        for name in [m for m in sys.modules if m == "torchlogix" or m.startswith("torchlogix.")]:
            del sys.modules[name]
        pkg = types.ModuleType("torchlogix")
        pkg.__path__ = list(spec.submodule_search_locations)
        pkg.__spec__ = spec
        sys.modules["torchlogix"] = pkg
        return importlib.import_module("torchlogix.layers")


def torchlogix_net(
    in_dim: int, widths: list[int], k: int, tau: float, wiring: list[str] | None = None
) -> nn.Module:
    """The peer's DLGN: ``LogicDense`` layers (raw parametrization, soft sampling, its default
    residual init) with its ``random-unique`` wiring (``random`` where ours is), then GroupSum."""
    layers = import_torchlogix_layers()
    dims = [in_dim, *widths]
    wiring = wiring or ["unique"] * len(widths)
    methods = {"unique": "random-unique", "random": "random"}
    mods = [
        layers.LogicDense(
            dims[i], dims[i + 1], connections_kwargs={"init_method": methods[wiring[i]]}
        )
        for i in range(len(widths))
    ]
    return nn.Sequential(*mods, layers.GroupSum(k, tau))


def torchlogix_circuit(model: nn.Module, in_dim: int):
    """The peer's discretized circuit in our :class:`~dlgn.Circuit` form (its raw LUT ids use
    difflogic's numbering, as ours; the bench checks packed counts against its eval output)."""
    from .layers import Circuit

    dense = list(model)[:-1]
    return Circuit(
        in_dim=in_dim,
        ids=[m.get_luts_and_ids()[1].detach().cpu() for m in dense],
        ia=[m.connections.indices[0].detach().cpu() for m in dense],
        ib=[m.connections.indices[1].detach().cpu() for m in dense],
        k=model[-1].k,
        tau=float(model[-1].tau),
    )


# ----------------------------------------------------------------------------- arms


@dataclasses.dataclass
class Arm:
    """One trained configuration: how to build it and read its circuit and logits."""

    name: str
    build: Callable[[int, list[int], int, float, int, list[str]], nn.Module]
    circuit: Callable[[nn.Module, int], object]
    logits: Callable[[nn.Module], list[torch.Tensor]]


def _ours(mode: str) -> Arm:
    def build(in_dim, widths, k, tau, seed, wiring):
        from .layers import LogicNet
        from .train import noise_generator

        torch.manual_seed(seed)
        return LogicNet.from_widths(
            in_dim,
            widths,
            num_classes=k,
            tau=tau,
            connections=wiring,
            mode=mode,
            gumbel_tau=1.0,
            generator=noise_generator(10_000 + seed),
        )

    return Arm(
        name={"gumbel": "GLGN", "softmax": "DLGN", "hard_st": "hard_st"}[mode],
        build=build,
        circuit=lambda net, in_dim: net.discretize(),
        logits=lambda net: [m.weight for m in net.logic_layers],
    )


def _peer() -> Arm:
    def build(in_dim, widths, k, tau, seed, wiring):
        torch.manual_seed(seed)
        return torchlogix_net(in_dim, widths, k, tau, wiring)

    return Arm(
        name="torchlogix",
        build=build,
        circuit=torchlogix_circuit,
        logits=lambda model: [m.weight for m in list(model)[:-1]],
    )


# ----------------------------------------------------------------------------- one run


@torch.no_grad()
def _evaluate(arm: Arm, model: nn.Module, data: dict, seed: int, step: int) -> dict:
    from .metrics import unused_fraction

    x, y = data["x_test"], data["y_test"]
    model.eval()
    discrete = (model(x).argmax(-1) == y).double().mean().item()
    model.train()
    layers = getattr(model, "logic_layers", [])
    saved = [m.generator for m in layers]
    for m in layers:  # a metric-only generator: the training noise stream is left untouched
        m.generator = torch.Generator().manual_seed(777_000 + 1000 * seed + step)
    try:
        train_mode = (model(x).argmax(-1) == y).double().mean().item()
    finally:
        for m, g in zip(layers, saved):
            m.generator = g
    circuit = arm.circuit(model, x.shape[1])
    peaks = torch.cat([torch.softmax(z, -1).max(-1).values for z in arm.logits(model)])
    return {
        "discrete_acc": discrete,
        "train_mode_acc": train_mode,
        "gap": train_mode - discrete,
        "unused": unused_fraction(circuit)["total"],
        "max_softmax": peaks.double().mean().item(),
    }


def _run(arm: Arm, data: dict, widths, k, tau, steps, seed, eval_every, desc, wiring) -> dict:
    from .packed import pack_bits, packed_forward
    from .train import train

    in_dim = data["x_train"].shape[1]
    model = arm.build(in_dim, list(widths), k, tau, seed, wiring)
    result = train(
        model,
        data["x_train"],
        data["y_train"],
        steps=steps,
        lr=0.01,
        batch_size=100,
        seed=seed,
        eval_every=eval_every,
        evaluate=lambda step: _evaluate(arm, model, data, seed, step),
        progress=True,
        desc=desc,
    )
    # The packed int64 circuit must reproduce the float eval circuit exactly.
    model.eval()
    with torch.no_grad():
        scores = model(data["x_test"])
    counts = packed_forward(arm.circuit(model, in_dim), pack_bits(data["x_test"], 64))
    if not torch.equal(counts.double(), (scores.double() * tau).round()):
        raise AssertionError(f"{arm.name}: packed counts differ from tau x the float GroupSum")
    packed_acc = (counts.argmax(-1) == data["y_test"]).double().mean().item()
    last = result.history[-1]
    if packed_acc != last["discrete_acc"]:
        raise AssertionError(f"{arm.name}: packed accuracy {packed_acc} != discrete {last}")
    return {"history": result.history, "seconds": result.seconds, "packed_acc": packed_acc}


def _arms(ctx: Context) -> list[Arm]:
    """Every arm in every mode: GLGN, DLGN (the baseline), the hard_st ablation and the peer."""
    arms = [_ours("gumbel"), _ours("softmax"), _ours("hard_st")]
    if import_torchlogix_layers() is not None:
        arms.append(_peer())
    else:
        ctx.log(PEER_MISSING)
    return arms


def _quality(
    ctx: Context, dataset: str, data: dict, k: int, smoke_widths: list[int], first_wiring: str
) -> None:
    widths = ctx.pick(smoke=smoke_widths, quick=[QUICK_WIDTH] * 3, full=[4000] * 3)
    wiring = [first_wiring] + ["unique"] * (len(widths) - 1)
    steps = ctx.pick(smoke=20, quick=QUICK_STEPS, full=3000)
    eval_every = ctx.pick(smoke=10, quick=QUICK_STEPS // 4, full=250)
    seeds = ctx.pick(smoke=(0,), quick=(0,), full=(0, 1, 2))
    tau = 30.0 if not ctx.smoke else 8.0
    runs: dict[str, list[dict]] = {}
    with single_thread():
        for arm in _arms(ctx):
            runs[arm.name] = []
            for seed in seeds:
                r = _run(
                    arm,
                    data,
                    widths,
                    k,
                    tau,
                    steps,
                    seed,
                    eval_every,
                    f"{dataset} {arm.name} s{seed}",
                    wiring,
                )
                runs[arm.name].append(r)
                last = r["history"][-1]
                ctx.log(
                    f"  {dataset} {arm.name} seed {seed}: discrete {last['discrete_acc']:.3f} "
                    f"train-mode {last['train_mode_acc']:.3f} gap {last['gap']:+.3f} "
                    f"unused {last['unused']:.3f} max-softmax {last['max_softmax']:.3f} "
                    f"({r['seconds']:.0f} s)"
                )
    ctx.path(f"{dataset}_runs.json").write_text(json.dumps(runs, indent=2) + "\n")

    def final(name, key):
        return statistics.mean(r["history"][-1][key] for r in runs[name])

    common = {
        "dataset": dataset,
        "seeds": len(seeds),
        "steps": steps,
        "widths": "x".join(map(str, widths)),
    }
    for name in runs:
        base = {} if name == "DLGN" else {"baseline": "DLGN"}
        for key, unit, better_low in (
            ("discrete_acc", "fraction", False),
            ("train_mode_acc", "fraction", False),
            ("gap", "fraction", True),
            ("unused", "fraction", True),
            ("max_softmax", "probability", False),
        ):
            extra = dict(base)
            if base:
                extra["baseline_value"] = final("DLGN", key)
            ctx.record(
                key, final(name, key), unit, lower_is_better=better_low, arm=name, **extra, **common
            )
        ctx.record(
            "train_seconds",
            statistics.mean(r["seconds"] for r in runs[name]),
            "s",
            arm=name,
            **(
                {
                    "baseline": "DLGN",
                    "baseline_value": statistics.mean(r["seconds"] for r in runs["DLGN"]),
                }
                if base
                else {}
            ),
            **common,
        )
        best = statistics.mean(max(h["discrete_acc"] for h in r["history"]) for r in runs[name])
        ctx.record("best_discrete_acc", best, "fraction", lower_is_better=False, arm=name, **common)

    steps_logged = [h["step"] for h in runs["DLGN"][0]["history"]]
    for key, label in (
        ("discrete_acc", "discrete (eval) test accuracy"),
        ("gap", "gap = train-mode - discrete accuracy"),
        ("unused", "unused neuron fraction"),
        ("max_softmax", "mean max softmax(z)"),
    ):
        series, errors = {}, {}
        for name in runs:
            per_step = list(zip(*[[h[key] for h in r["history"]] for r in runs[name]]))
            series[name] = [statistics.mean(v) for v in per_step]
            if len(seeds) > 1:
                errors[name] = [statistics.stdev(v) for v in per_step]
        plot_lines(
            steps_logged,
            series,
            ctx.path(f"{dataset}_{key}.png"),
            xlabel="step",
            ylabel=label,
            title=f"{dataset}: {common['widths']} neurons, {len(seeds)} seed(s)",
            errors=errors or None,
        )
    lines = [
        "| arm | discrete acc | train-mode acc | gap | unused | max softmax | train s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in runs:
        lines.append(
            f"| {name} | {final(name, 'discrete_acc'):.3f} | {final(name, 'train_mode_acc'):.3f} | "
            f"{final(name, 'gap'):+.3f} | {final(name, 'unused'):.3f} | "
            f"{final(name, 'max_softmax'):.3f} | "
            f"{statistics.mean(r['seconds'] for r in runs[name]):.0f} |"
        )
    curve = ["", "| arm | " + " | ".join(f"step {s}" for s in steps_logged) + " |"]
    curve.append("|---|" + "---|" * len(steps_logged))
    for name in runs:
        per_step = list(zip(*[[h["discrete_acc"] for h in r["history"]] for r in runs[name]]))
        gaps = list(zip(*[[h["gap"] for h in r["history"]] for r in runs[name]]))
        curve.append(
            f"| {name} | "
            + " | ".join(
                f"{statistics.mean(a):.3f} ({statistics.mean(g):+.3f})"
                for a, g in zip(per_step, gaps)
            )
            + " |"
        )
    header = (
        f"{dataset}: {common['widths']} neurons, {steps} steps, {len(seeds)} seed(s), final values "
        f"(mean over seeds) on the test split\n\n"
    )
    ctx.path(f"{dataset}_table.md").write_text(
        header
        + "\n".join(lines)
        + "\n\nDiscrete accuracy (gap) per logged step:\n"
        + "\n".join(curve)
        + "\n"
    )


@SUITE.case("digits_gap", kind="quality")
def digits_gap(ctx: Context) -> None:
    """Bundled digits (192 thermometer bits): discrete accuracy, gap, unused, GLGN vs DLGN."""
    from .data import digits

    # Smoke: 2 x 100 (the unique wiring of 192 bits needs >= 96 neurons; 10 must divide the last).
    _quality(ctx, "digits", digits((4, 8, 12), test_fraction=0.2, seed=0), 10, [100, 100], "unique")


@SUITE.case("xor_gap", kind="quality")
def xor_gap(ctx: Context) -> None:
    """Synthetic 2-XOR on 32 bits: discrete accuracy, gap, unused, GLGN vs DLGN."""
    from .data import two_xor

    n_train, n_test = ctx.pick(smoke=(1024, 256), quick=(4096, 1024), full=(8192, 2048))
    # 32 bits have only 32·31/2 = 496 distinct pairs, so no 'unique' first layer of 4000 exists
    # (the official get_unique_connections asserts too): the first layer is wired 'random'.
    _quality(ctx, "xor", two_xor(n_train, n_test, bits=32, seed=0), 4, [64, 64], "random")


# ----------------------------------------------------------------------------- speed


def _copy_into_peer(net, peer) -> None:
    """Give the peer our wiring and logits, so both compute the same function."""
    for ours, theirs in zip(net.logic_layers, list(peer)[:-1]):
        theirs.connections.indices = torch.stack([ours.ia, ours.ib]).clone()
        theirs.weight.data.copy_(ours.weight.data)


@SUITE.case("train_step_speed", kind="speed")
def train_step_speed(ctx: Context) -> None:
    """ms per training step at B = 128, 4 layers: softmax (DLGN) vs gumbel (GLGN) vs torchlogix."""
    from .layers import LogicNet
    from .train import noise_generator

    in_dim = ctx.pick(smoke=64, quick=1024, full=1024)
    batch = ctx.pick(smoke=16, quick=128, full=128)
    widths = ctx.pick(smoke=[64], quick=[16_000], full=[16_000, 64_000])
    have_peer = import_torchlogix_layers() is not None
    if not have_peer:
        ctx.log(PEER_MISSING)
    for width in widths:
        torch.manual_seed(0)
        nets = {
            mode: LogicNet.from_widths(
                in_dim,
                [width] * 4,
                num_classes=8,
                tau=30.0,
                mode=mode,
                generator=noise_generator(1),
            )
            for mode in ("softmax", "gumbel")
        }
        nets["gumbel"].load_state_dict(nets["softmax"].state_dict())
        x = torch.randint(0, 2, (batch, in_dim), generator=torch.Generator().manual_seed(0)).float()
        y = torch.randint(0, 8, (batch,), generator=torch.Generator().manual_seed(1))
        models = {"softmax (DLGN)": nets["softmax"], "gumbel (GLGN)": nets["gumbel"]}
        if have_peer:
            peer = torchlogix_net(in_dim, [width] * 4, 8, 30.0)
            _copy_into_peer(nets["softmax"], peer)
            models["torchlogix (soft)"] = peer
        with torch.no_grad():
            ref = nets["softmax"].train()(x)
            if have_peer:
                out = peer.train()(x)
                err = ((out - ref).norm() / ref.norm()).item()
                if err > 1e-5:
                    raise AssertionError(f"torchlogix output differs from ours: rel err {err:.2e}")
                ctx.log(f"  width {width}: torchlogix train-mode output = ours (rel err {err:.1e})")
            a = nets["gumbel"].eval()(x)
            if not torch.equal(a, nets["softmax"].eval()(x)):
                raise AssertionError("eval circuits of the two modes differ for equal logits")
        steps = {}
        for name, model in models.items():
            model.train()
            opt = torch.optim.Adam(model.parameters(), lr=0.01)

            def step(model=model, opt=opt, x=x, y=y):
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

            steps[name] = step
        with single_thread():
            result = compare(
                steps,
                baseline="softmax (DLGN)",
                min_time=ctx.pick(smoke=0.01, quick=0.2, full=2.0),
                min_rounds=ctx.pick(smoke=2, quick=3, full=7),
            )
        ctx.log(str(result))
        result.record(ctx, metric="train_step", width=width, layers=4, batch=batch, in_dim=in_dim)


@SUITE.case("eval_speed", kind="speed")
def eval_speed(ctx: Context) -> None:
    """Samples/s of the discretized net: packed int64 bitwise vs float eval (torch, one thread)."""
    from .layers import LogicNet
    from .packed import pack_bits, packed_forward

    in_dim = ctx.pick(smoke=64, quick=1024, full=1024)
    width = ctx.pick(smoke=64, quick=16_000, full=16_000)
    batch = ctx.pick(smoke=100, quick=256, full=8192)
    torch.manual_seed(0)
    net = LogicNet.from_widths(in_dim, [width] * 4, num_classes=8, tau=30.0).eval()
    for layer in net.logic_layers:
        layer.weight.data.mul_(3)
    x = torch.randint(0, 2, (batch, in_dim), generator=torch.Generator().manual_seed(0)).float()
    circuit = net.discretize()
    with torch.no_grad():
        counts = packed_forward(circuit, pack_bits(x, 64))
        if not torch.equal(counts.double(), (net(x).double() * 30.0).round()):
            raise AssertionError("packed counts differ from 30 x the float eval GroupSum")

    def float_eval():
        with torch.no_grad():
            return net(x).argmax(-1)

    def packed_eval():
        return packed_forward(circuit, pack_bits(x, 64)).argmax(-1)

    with single_thread():
        result = compare(
            {"float eval": float_eval, "packed int64": packed_eval},
            baseline="float eval",
            min_time=ctx.pick(smoke=0.01, quick=0.1, full=2.0),
            min_rounds=ctx.pick(smoke=2, quick=3, full=7),
        )
    ctx.log(str(result))
    params = {"width": width, "layers": 4, "batch": batch, "in_dim": in_dim}
    result.record(ctx, metric="eval_time", **params)
    base = batch / result.timings["float eval"].median
    ctx.record(
        "samples_per_s", base, "samples/s", lower_is_better=False, impl="float eval", **params
    )
    ctx.record(
        "samples_per_s",
        batch / result.timings["packed int64"].median,
        "samples/s",
        lower_is_better=False,
        impl="packed int64",
        baseline="float eval",
        baseline_value=base,
        **params,
    )
