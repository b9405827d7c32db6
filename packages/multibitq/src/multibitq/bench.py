"""The multibitq benchmark suite (``neurips25 bench multibitq``).

Every case runs in every mode (smoke / quick / full) and sizes itself with ``ctx.pick``; the
workspace tests run each case in smoke mode on an empty checkpoint cache.

Cases: ``correction_overhead`` (speed), the per-step cost of the weight bias correction;
``epoch_cost`` (speed), the time and sample passes of one re-scoring cycle of ours against
Any-Precision and joint training; ``reduced_reproduction`` (quality), scikit-learn digits.
The brevitas peer (the ``peers`` extra) runs in the quality case when installed; the case says
so and skips it when it is not.
"""

from __future__ import annotations

import copy
import json
import statistics
import time

import torch
import torch.nn.functional as F

from neurips25_core.bench import Context, Suite, compare, single_thread

SUITE = Suite(
    name="multibitq",
    paper="Efficient Multi-bit Quantization Network Training via Weight Bias Correction and Bit-wise Coreset Sampling",
    url="https://arxiv.org/abs/2510.20673",
)


@SUITE.case(
    "correction_overhead",
    kind="speed",
    description="one training step (forward + backward) of a low-bit child, shared BN, with the "
    "weight bias correction against the same step without it (plain joint training)",
)
def correction_overhead(ctx: Context) -> None:
    """Step time of ours (correction) / joint without correction, same weights and batch."""
    from multibitq.modules import MultiBitConfig, convert_, resnet_multibit, using_bits

    width = ctx.pick(smoke=4, quick=16, full=16)
    batch = ctx.pick(smoke=8, quick=64, full=64)
    bits = 2
    torch.manual_seed(0)
    float_model = resnet_multibit(depth=8, in_channels=1, num_classes=10, width=width)
    models = {
        "joint (no correction)": convert_(
            copy.deepcopy(float_model), MultiBitConfig(bits=(2, 4, 32), correction="none")
        ),
        "ours (mean_var correction)": convert_(
            copy.deepcopy(float_model), MultiBitConfig(bits=(2, 4, 32), correction="mean_var")
        ),
    }
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)

    # The two compute the same thing at 32 bits (the correction is skipped there): check first.
    with torch.no_grad():
        a, b = (m.eval()(x) for m in models.values())
    if not torch.equal(a, b):
        raise AssertionError("the two models differ at 32 bits; the comparison would be unfair")
    for m in models.values():
        m.train()

    def step(model):
        def run():
            model.zero_grad(set_to_none=True)
            with using_bits(model, bits):
                F.cross_entropy(model(x), y).backward()

        return run

    with single_thread():
        result = compare(
            {name: step(m) for name, m in models.items()},
            baseline="joint (no correction)",
            min_time=ctx.pick(smoke=0.02, quick=0.5, full=3.0),
            cpu_time=True,
        )
    ctx.log(str(result))
    params = sum(p.numel() for p in float_model.parameters())
    result.record(ctx, metric="step_time", bits=bits, batch=batch, width=width, parameters=params)


def _digits_subset(n: int | None):
    from multibitq.datasets import digits

    train_set, test_set = digits()
    if n is not None:
        train_set = torch.utils.data.TensorDataset(*(t[:n] for t in train_set.tensors))
    return train_set, test_set


def _cost_model(prune_rate: float, rescore_every: int) -> float:
    """Predicted speed-up over Any-Precision: 3 / (3(1 − p) + 1/R) (backward ≈ 2× forward)."""
    return 3.0 / (3.0 * (1.0 - prune_rate) + 1.0 / rescore_every)


@SUITE.case(
    "epoch_cost",
    kind="speed",
    description="one re-scoring cycle (R epochs, scoring included) of ours at p = 0.8 against "
    "Any-Precision (baseline) and joint training with the correction, same data and bits",
)
def epoch_cost(ctx: Context) -> None:
    """Training time and sample passes per epoch of ours / Any-Precision / joint + correction."""
    from multibitq.modules import MultiBitConfig, convert_, resnet_multibit
    from multibitq.training import train_multibit

    n = ctx.pick(smoke=64, quick=256, full=None)
    width = ctx.pick(smoke=4, quick=16, full=16)
    bits = ctx.pick(smoke=(2, 32), quick=(2, 4, 32), full=(1, 2, 4, 8, 32))
    train_set, _ = _digits_subset(n)
    rescore_every, prune_rate = 3, 0.8
    runs = {
        "Any-Precision": ("anyprecision", dict(bn="switchable", correction="none")),
        "joint + correction": ("joint", dict(bn="shared", correction="mean_var")),
        "ours p=0.8": ("ours", dict(bn="shared", correction="mean_var")),
    }
    histories = {}

    def one_cycle(name):
        method, kwargs = runs[name]
        cfg = MultiBitConfig(
            bits=bits, prune_rate=prune_rate, rescore_every=rescore_every, **kwargs
        )

        def run():
            torch.manual_seed(0)
            model = convert_(resnet_multibit(8, 1, 10, width), cfg)
            # warmup_epochs=0: epoch 0 scores, epochs 1..R-1 reuse the scores (one full cycle)
            histories[name] = train_multibit(
                model, train_set, cfg, method, epochs=rescore_every, warmup_epochs=0
            )

        return run

    with single_thread():
        result = compare(
            {name: one_cycle(name) for name in runs},
            baseline="Any-Precision",
            warmup=1,  # the first call pays one-off lazy initialisation
            min_rounds=ctx.pick(smoke=1, quick=3, full=5),
            min_time=0.0,
            cpu_time=True,
        )
    ctx.log(str(result))
    result.record(ctx, metric="cycle_time", bits=list(bits), n=len(train_set), epochs=rescore_every)
    ap = histories["Any-Precision"].sample_pass_equivalents
    for name, h in histories.items():
        ctx.record(
            "sample_passes_per_epoch",
            h.sample_pass_equivalents / rescore_every,
            "passes",
            baseline="Any-Precision",
            baseline_value=ap / rescore_every,
            impl=name,
            train_passes=h.train_passes,
            score_forwards=h.score_forwards,
            cost_model_speedup=_cost_model(prune_rate, rescore_every)
            if name.startswith("ours")
            else 1.0,
        )


def _quality_runs(mode: str, dataset: str = "digits") -> dict[str, dict]:
    runs = {
        "Any-Precision": dict(method="anyprecision", bn="switchable", correction="none"),
        "ours p=0.8": dict(method="ours", bn="shared", correction="mean_var", prune_rate=0.8),
    }
    if dataset == "synthetic":  # the p = 0.8 question with 8,000 samples per child-epoch
        return {
            **runs,
            "joint + correction": dict(method="joint", bn="shared", correction="mean_var"),
            "random p=0.8": dict(
                method="ours", bn="shared", correction="mean_var", prune_rate=0.8, coreset="random"
            ),
        }
    if mode != "full":
        return runs
    return {
        "Dedicated": dict(method="dedicated", bn="shared", correction="none"),
        **runs,
        "joint, no correction": dict(method="joint", bn="shared", correction="none"),
        "joint + correction": dict(method="joint", bn="shared", correction="mean_var"),
        "ours p=0.5": dict(method="ours", bn="shared", correction="mean_var", prune_rate=0.5),
        **{
            f"{name} p=0.8": dict(
                method="ours", bn="shared", correction="mean_var", prune_rate=0.8, coreset=name
            )
            for name in ("random", "el2n", "entropy", "forgetting", "moderate", "shared")
        },
    }


#: The brevitas peer's arm: Dedicated QAT with brevitas's quantizers, one model per bit-width.
BREVITAS = "brevitas Dedicated"


def _quality_sizes(mode: str, dataset: str = "digits") -> dict:
    if dataset == "synthetic":  # the issue's --full addition: 10k 16x16 images, 10 epochs, 1 seed
        return dict(
            n={"smoke": 300, "quick": 1000, "full": 10_000}[mode],
            n_test={"smoke": 100, "quick": 500, "full": 2000}[mode],
            width={"smoke": 4, "quick": 16, "full": 16}[mode],
            bits={"smoke": (2, 32), "quick": (2, 4, 32), "full": (1, 2, 4, 8, 32)}[mode],
            unseen={"smoke": (3,), "quick": (3,), "full": (3, 5, 6)}[mode],
            epochs={"smoke": 1, "quick": 2, "full": 10}[mode],
            seeds=(0,),
            brevitas_bits=(),
        )
    return dict(
        n={"smoke": 200, "quick": None, "full": None}[mode],
        width={"smoke": 4, "quick": 16, "full": 16}[mode],
        bits={"smoke": (2, 32), "quick": (2, 4, 32), "full": (1, 2, 4, 8, 32)}[mode],
        unseen={"smoke": (3,), "quick": (3,), "full": (3, 5, 6)}[mode],
        epochs={"smoke": 1, "quick": 5, "full": 30}[mode],
        seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2)}[mode],
        brevitas_bits={"smoke": (2,), "quick": (4,), "full": (2, 4, 8)}[mode],
    )


def _datasets(mode: str, dataset: str):
    size = _quality_sizes(mode, dataset)
    if dataset == "digits":
        return _digits_subset(size["n"])
    from multibitq.datasets import synthetic_images

    return synthetic_images(n=size["n"], seed=0), synthetic_images(n=size["n_test"], seed=1)


def _brevitas_rows(mode: str, dataset: str, seed: int, train_set, test_set) -> dict:
    """The peer: brevitas's QAT layers on the same network, one model per bit-width, trained with
    Dedicated's recipe (:func:`multibitq.training.train_classifier`)."""
    from multibitq.modules import resnet_multibit
    from multibitq.peers import brevitas_resnet, classifier_accuracy
    from multibitq.training import train_classifier

    size = _quality_sizes(mode, dataset)
    torch.manual_seed(seed)
    float_model = resnet_multibit(8, 1, 10, size["width"])
    x_check = train_set.tensors[0][:32]
    with torch.no_grad():  # the same network with every quantizer off: outputs equal first
        if not torch.equal(
            brevitas_resnet(float_model, None).eval()(x_check), float_model.eval()(x_check)
        ):
            raise AssertionError("brevitas's network differs from ours with quantizers off")
    acc, cpu, seconds, passes = {}, 0.0, 0.0, 0
    for b in size["brevitas_bits"]:
        model = brevitas_resnet(float_model.train(), b)
        cpu0 = time.process_time()
        h = train_classifier(model, train_set, size["epochs"], seed=seed)
        cpu += time.process_time() - cpu0
        seconds += h.seconds
        passes += h.train_passes
        acc[b] = classifier_accuracy(model, test_set.tensors)
    return dict(
        seed=seed,
        accuracy=acc,
        unseen={},
        mean=statistics.fmean(acc.values()),
        seconds=seconds,
        cpu_seconds=cpu,
        passes=float(passes),
        train_passes=passes,
        score_forwards=0,
        mismatch=float("nan"),
        angle=float("nan"),
    )


def _quality_job(job: tuple) -> dict[str, dict]:
    """The runs of one job ``(mode, dataset, seed, names)`` (``names=None``: every run of the
    dataset, the brevitas peer included when installed): ``{run: row}``."""
    from multibitq.data import recalibrate_bn
    from multibitq.diagnostics import activation_mismatch, gradient_angles
    from multibitq.modules import MultiBitConfig, convert_, resnet_multibit
    from multibitq.peers import brevitas_available
    from multibitq.training import evaluate, train_multibit

    mode, dataset, seed, names = job
    size = _quality_sizes(mode, dataset)
    bits, unseen, width, epochs = size["bits"], size["unseen"], size["width"], size["epochs"]
    train_set, test_set = _datasets(mode, dataset)
    calib = torch.utils.data.DataLoader(train_set, batch_size=256, shuffle=False)
    runs = _quality_runs(mode, dataset)
    if names is not None:
        runs = {k: v for k, v in runs.items() if k in names}
    rows = {}
    with single_thread():
        # one untimed step first: the first training call of a process pays lazy initialisation
        warm_cfg = MultiBitConfig(bits=(32,))
        warm = convert_(resnet_multibit(8, 1, 10, 4), warm_cfg)
        x_warm, y_warm = train_set.tensors[0][:64], train_set.tensors[1][:64]
        train_multibit(warm, (x_warm, y_warm), warm_cfg, "joint", epochs=1, batch_size=64)
        for name, spec in runs.items():
            spec = dict(spec)
            method = spec.pop("method")
            coreset = spec.pop("coreset", "bitwise")
            cfg = MultiBitConfig(bits=bits, rescore_every=3, seed=seed, **spec)
            torch.manual_seed(seed)
            model = convert_(resnet_multibit(8, 1, 10, width), cfg)
            cpu0 = time.process_time()
            hist = train_multibit(model, train_set, cfg, method, epochs=epochs, coreset=coreset)
            cpu = time.process_time() - cpu0
            acc = {b: evaluate(hist.models[b], test_set, bits=b) for b in bits}
            if method == "dedicated":
                unseen_acc = {}
            elif cfg.bn == "switchable":  # Any-Precision needs calibration for unseen bits
                calibrated = copy.deepcopy(model)
                for b in unseen:
                    recalibrate_bn(calibrated, b, calib)
                unseen_acc = {b: evaluate(calibrated, test_set, bits=b) for b in unseen}
            else:
                unseen_acc = {b: evaluate(model, test_set, bits=b) for b in unseen}
            mismatch = angles = float("nan")
            if method != "dedicated":
                per_bn = activation_mismatch(model, calib, min(bits), num_batches=2)
                mismatch = statistics.fmean(per_bn.values())
                x, y = train_set.tensors[0][:256], train_set.tensors[1][:256]
                per_layer = gradient_angles(model.train(), (x, y), bits)
                model.eval()
                angles = statistics.fmean(a for d in per_layer.values() for a in d.values())
            rows[name] = dict(
                seed=seed,
                accuracy=acc,
                unseen=unseen_acc,
                mean=statistics.fmean(acc.values()),
                seconds=hist.seconds,
                cpu_seconds=cpu,
                passes=hist.sample_pass_equivalents,
                train_passes=hist.train_passes,
                score_forwards=hist.score_forwards,
                mismatch=mismatch,
                angle=angles,
            )
        want_peer = names is None or BREVITAS in names
        if want_peer and size["brevitas_bits"] and brevitas_available():
            rows[BREVITAS] = _brevitas_rows(mode, dataset, seed, train_set, test_set)
    return rows


def _workers(mode: str) -> int:
    """Processes for the quality jobs: ``MULTIBITQ_WORKERS``, default 2 for ``--full`` (one per
    core of the reference machine), 1 otherwise. Every run is seeded and single-threaded, so the
    results do not depend on the count."""
    import os

    from neurips25_core.parallel import workers_from_env

    return workers_from_env(
        "MULTIBITQ_WORKERS", min(2, os.cpu_count() or 1) if mode == "full" else 1
    )


def _jobs(mode: str) -> list[tuple]:
    """Digits: one job per seed (every run); synthetic (full only): one job per run, largest first."""
    jobs = [(mode, "digits", seed, None) for seed in _quality_sizes(mode)["seeds"]]
    if mode == "full":
        jobs += [(mode, "synthetic", 0, (name,)) for name in _quality_runs(mode, "synthetic")]
    return jobs


@SUITE.case(
    "reduced_reproduction",
    kind="quality",
    description="scikit-learn digits, PreAct ResNet (3 stages x 1 block): per-bit and mean test "
    "accuracy, unseen bits without calibration, mismatch, gradient angles, training cost; "
    "baseline Any-Precision (switchable BN, recursive distillation); peer brevitas Dedicated; "
    "--full adds the synthetic 16x16 set (10k images, 10 epochs, one seed)",
)
def reduced_reproduction(ctx: Context) -> None:
    from multibitq.peers import brevitas_available
    from neurips25_core.parallel import process_map

    if not brevitas_available():
        ctx.log("brevitas (the peer, the 'peers' extra) is not installed: its arm is skipped")
    jobs = _jobs(ctx.mode)
    workers = _workers(ctx.mode)
    if workers > 1:
        ctx.log(f"quality: {len(jobs)} jobs in {workers} processes, one thread each")
    results = process_map(_quality_job, jobs, workers=workers, desc="multibitq quality")
    for dataset in ("digits", "synthetic"):
        per_job = [r for job, r in zip(jobs, results, strict=True) if job[1] == dataset]
        if not per_job:
            continue
        size = _quality_sizes(ctx.mode, dataset)
        if dataset == "digits":
            rows = {name: [rs[name] for rs in per_job] for name in per_job[0]}
        else:
            rows = {name: [row] for rs in per_job for name, row in rs.items()}
        n = len(_datasets(ctx.mode, dataset)[0])
        _report_quality(
            ctx, rows, size["bits"], size["unseen"], size["epochs"], size["seeds"], n, dataset,
            size["brevitas_bits"],
        )  # fmt: skip


def _mean_over_seeds(values: list[float]) -> tuple[float, float]:
    values = [v for v in values if v == v]
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def _report_quality(
    ctx, rows, bits, unseen, epochs, seeds, n, dataset="digits", peer_bits=()
) -> None:
    from neurips25_core.bench import plot_lines

    base = rows["Any-Precision"]
    base_mean, _ = _mean_over_seeds([r["mean"] for r in base])
    base_passes, _ = _mean_over_seeds([r["passes"] for r in base])
    base_seconds, _ = _mean_over_seeds([r["cpu_seconds"] for r in base])
    peer_bits = tuple(b for b in peer_bits if b in bits) if BREVITAS in rows else ()
    n_test = len(_datasets(ctx.mode, dataset)[1])
    lines = [
        f"{dataset} ({n} train / {n_test} test), {epochs} epochs, seeds {list(seeds)}, trained "
        f"bits {list(bits)}, unseen {list(unseen)} (Any-Precision: after recalibrate_bn; "
        "shared-BN runs: no calibration). Accuracy in %, mean ± std over seeds."
        + (
            f" {BREVITAS}: brevitas's QAT layers on the same network, one model per bit-width "
            f"at {list(peer_bits)} bits only; 'mean {'/'.join(map(str, peer_bits))}' compares "
            "every run on those bits."
            if peer_bits
            else ""
        ),
        "",
        "| run | "
        + " | ".join(f"{b} bit" for b in bits)
        + " | mean | "
        + (f"mean {'/'.join(map(str, peer_bits))} | " if peer_bits else "")
        + " | ".join(f"{b} bit (unseen)" for b in unseen)
        + " | mismatch @"
        + f"{min(bits)} bit | angle ° | sample passes | speed-up (passes) | CPU s | speed-up (CPU) |",
        "|---|" + "---:|" * (len(bits) + len(unseen) + 7 + bool(peer_bits)),
    ]
    series = {}
    for name, rs in rows.items():
        per_bit = {
            b: _mean_over_seeds([100 * r["accuracy"][b] for r in rs if b in r["accuracy"]])
            for b in bits
        }
        peer_mean = (
            _mean_over_seeds(
                [statistics.fmean(100 * r["accuracy"][b] for b in peer_bits) for r in rs]
            )
            if peer_bits
            else None
        )
        per_unseen = {
            b: _mean_over_seeds([100 * r["unseen"][b] for r in rs if b in r["unseen"]])
            for b in unseen
        }
        mean, mean_std = _mean_over_seeds([100 * r["mean"] for r in rs])
        mismatch, _ = _mean_over_seeds([r["mismatch"] for r in rs])
        angle, _ = _mean_over_seeds([r["angle"] for r in rs])
        passes, _ = _mean_over_seeds([r["passes"] for r in rs])
        cpu, _ = _mean_over_seeds([r["cpu_seconds"] for r in rs])
        cells = ["—" if m != m else f"{m:.1f} ± {s:.1f}" for m, s in per_bit.values()]
        cells += ["—" if name == BREVITAS else f"{mean:.1f} ± {mean_std:.1f}"]
        if peer_mean is not None:
            cells += [f"{peer_mean[0]:.1f} ± {peer_mean[1]:.1f}"]
        cells += ["—" if m != m else f"{m:.1f} ± {s:.1f}" for m, s in per_unseen.values()]
        cells += [
            "—" if mismatch != mismatch else f"{mismatch:.3f}",
            "—" if angle != angle else f"{angle:.1f}",
            f"{passes:,.0f}",
            f"{base_passes / passes:.2f}×",
            f"{cpu:.1f}",
            f"{base_seconds / cpu:.2f}×",
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        series[name] = [
            per_bit[b][0] if b in per_bit else per_unseen[b][0] for b in sorted({*bits, *unseen})
        ]
        ctx.record(
            "mean_accuracy",
            mean,
            "%",
            baseline="Any-Precision",
            baseline_value=100 * base_mean,
            lower_is_better=False,
            impl=name,
            per_bit={str(b): round(v[0], 2) for b, v in per_bit.items() if v[0] == v[0]},
            unseen={str(b): round(v[0], 2) for b, v in per_unseen.items() if v[0] == v[0]},
            seeds=list(seeds),
            epochs=epochs,
            mismatch=mismatch,
            angle=angle,
            dataset=dataset,
            mean_over_bits=list(peer_bits) if name == BREVITAS else list(bits),
        )
        if peer_mean is not None:
            ctx.record(
                "mean_accuracy_at_peer_bits",
                peer_mean[0],
                "%",
                baseline=BREVITAS,
                baseline_value=_mean_over_seeds(
                    [statistics.fmean(100 * r["accuracy"][b] for b in peer_bits)
                     for r in rows[BREVITAS]]
                )[0],
                lower_is_better=False,
                impl=name,
                bits=list(peer_bits),
                dataset=dataset,
            )  # fmt: skip
        ctx.record(
            "sample_passes",
            passes,
            "passes",
            baseline="Any-Precision",
            baseline_value=base_passes,
            impl=name,
            cpu_seconds=cpu,
            baseline_cpu_seconds=base_seconds,
            dataset=dataset,
        )
    table = "\n".join(lines)
    ctx.log(table)
    suffix = "" if dataset == "digits" else f"_{dataset}"
    ctx.path(f"quality{suffix}.md").write_text(table + "\n")
    raw = {
        name: [
            dict(
                r,
                accuracy={str(k): v for k, v in r["accuracy"].items()},
                unseen={str(k): v for k, v in r["unseen"].items()},
            )
            for r in rs
        ]
        for name, rs in rows.items()
    }
    ctx.path(f"quality_runs{suffix}.json").write_text(json.dumps(raw, indent=1))
    xs = sorted({*bits, *unseen})
    # runs without an unseen-bit number (Dedicated, the peer) are drawn at their trained bits
    plot_series = {k: v for k, v in series.items() if any(x == x for x in v)}
    plot_lines(
        xs,
        plot_series,
        ctx.path(f"accuracy_per_bit{suffix}.png"),
        xlabel=f"bit-width ({', '.join(map(str, unseen))}: unseen)",
        ylabel="test accuracy (%)",
        title=f"{dataset}, {epochs} epochs, {len(seeds)} seed(s)",
        logx=True,
    )
