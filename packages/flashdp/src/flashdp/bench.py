"""The flashdp benchmark suite (``neurips25 bench flashdp``).

* ``op_speed`` (speed): the clipped weight gradient of one linear layer for every arm
  (``nondp``, ``explicit``, ``ghost``, ``opacus``, ``flashdp`` torch), outputs checked equal first,
  interleaved medians, peak memory of a fresh process, the cost model beside them.
* ``sigma0_gap`` (quality): flashdp against opacus ``DPPerLayerOptimizer`` at σ = 0, 20 steps.
* ``dp_pretraining`` (quality): the reduced reproduction: a GPT-2 (2 layers, width 64, 4 heads,
  vocab 256, untied) pretrained from scratch on ``stdlib_corpus()`` with Poisson sampling and
  DP-AdamW at ε = 8; ``--full`` adds a same-size Llama and the ghost and explicit arms.

Every case runs in every mode and sizes itself with ``ctx.pick``.
"""

from __future__ import annotations

import math
import time

import torch

from neurips25_core.bench import (
    Context,
    Suite,
    compare,
    peak_live_bytes,
    peak_rss_subprocess,
    plot_bars,
    single_thread,
)

SUITE = Suite(
    name="flashdp",
    paper="FlashDP: Private Training Large Language Models with Efficient DP-SGD",
    url="https://arxiv.org/abs/2507.01154",
)

ARMS = ("nondp", "explicit", "ghost", "opacus", "flashdp")


def _op(arm: str, clip: float):
    from . import baselines, ops

    return {
        "nondp": lambda x, g: baselines.nondp_weight_grad(x, g),
        "explicit": lambda x, g: baselines.explicit_clipped_weight_grad(x, g, clip),
        "ghost": lambda x, g: baselines.ghost_clipped_weight_grad(x, g, clip),
        "opacus": lambda x, g: baselines.opacus_clipped_weight_grad(x, g, clip),
        "flashdp": lambda x, g: ops.clipped_linear_weight_grad(x, g, clip, backend="torch"),
    }[arm]


def cost_model(b: int, t: int, m: int, n: int, b_c: int = 2) -> dict[str, dict[str, float]]:
    """FLOPs and extra bytes (fp32) of one layer's weight gradient per arm (spec §6)."""
    base = 2 * b * t * m * n
    return {
        "nondp": {"flops": base, "extra_bytes": 0},
        "explicit": {"flops": base + 3 * b * m * n, "extra_bytes": 4 * b * m * n},
        "opacus": {"flops": base + 3 * b * m * n, "extra_bytes": 4 * b * m * n},
        "ghost": {"flops": 2 * b * t * t * (m + n) + base, "extra_bytes": 8 * b * t * t},
        "flashdp": {"flops": base + 3 * b * m * n, "extra_bytes": 4 * min(b, b_c) * m * n},
    }


_MEMORY_SETUP = """
import torch
from flashdp.bench import _op
torch.set_num_threads(1)  # core-helper-ok: inside the measured subprocess, whose peak RSS is read
x = torch.randn({b}, {t}, {n}); g = torch.randn({b}, {t}, {m})
fn = _op({arm!r}, 1.0)
_ = fn(x[:1, :1], g[:1, :1])  # lazy imports (opacus) and first-call set-up belong to the setup
"""


def _side_by_side(one, arms) -> dict[str, float]:
    """``{arm: one(arm)}``, the calls in threads side by side, children with a fixed mmap threshold."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    saved = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "131072"  # inherited by the children
    try:
        with ThreadPoolExecutor(max_workers=len(arms)) as pool:
            return dict(zip(arms, pool.map(one, arms), strict=True))
    finally:
        if saved is None:
            del os.environ["MALLOC_MMAP_THRESHOLD_"]
        else:
            os.environ["MALLOC_MMAP_THRESHOLD_"] = saved


def _peak_extra_rss(arms, b: int, t: int, m: int, n: int) -> dict[str, float]:
    """Peak extra RSS (MiB) of one call per arm, each in its own fresh process.

    The processes run side by side (each one's peak RSS is its own, so they do not disturb each
    other's measurement); most of their time is the torch import, which this overlaps.

    glibc's malloc raises its mmap threshold after the first large free, after which freed
    multi-MiB blocks stay in the heap and a loop over chunks shows up as the sum of its chunks
    (measured: 63 MiB for eight 8 MiB chunks freed one after the other). The children run with
    ``MALLOC_MMAP_THRESHOLD_=131072`` (a fixed threshold: large blocks are mapped and unmapped),
    so the peak RSS follows the live tensors.
    """

    def one(arm):
        setup = _MEMORY_SETUP.format(b=b, t=t, m=m, n=n, arm=arm)
        return peak_rss_subprocess("fn(x, g)", setup=setup)["delta"] / 2**20

    return _side_by_side(one, arms)


@SUITE.case("op_speed", kind="speed")
def op_speed(ctx: Context) -> None:
    """Op time and peak memory per arm at the issue's CPU shapes, beside the cost model."""
    from neurips25_core.testing import assert_close

    shapes = ctx.pick(
        smoke=[(2, 8, 16, 16)],
        quick=[(8, 128, 256, 256), (16, 64, 1024, 1024)],
        full=[(8, 128, 256, 256), (8, 512, 512, 512), (16, 64, 1024, 1024), (4, 1024, 256, 256)],
    )
    memory_shapes = ctx.pick(smoke=shapes, quick=shapes[-1:], full=shapes)
    labels, ratios = [], {a: [] for a in ARMS if a != "nondp"}
    for b, t, m, n in shapes:
        x, g = torch.randn(b, t, n), torch.randn(b, t, m)
        fns = {a: _op(a, 1.0) for a in ARMS}
        ref = fns["explicit"](x.double(), g.double())
        for arm in ("explicit", "ghost", "opacus", "flashdp"):
            # explicit/opacus take one flat fp32 norm over M·N elements: ~1e-5 at 1024² (measured)
            assert_close(fns[arm](x, g), ref.float(), rtol=5e-5, name=arm)
        with single_thread():
            result = compare(
                {a: (lambda f=f, x=x, g=g: f(x, g)) for a, f in fns.items()},
                baseline="nondp",
                min_time=ctx.pick(smoke=0.01, quick=0.1, full=1.0),
                min_rounds=ctx.pick(smoke=2, quick=5, full=7),
            )
        model = cost_model(b, t, m, n)
        result.record(ctx, B=b, T=t, M=m, N=n, threads=1)
        for arm in ARMS:
            ctx.record("model_flops", model[arm]["flops"], "FLOP", arm=arm, B=b, T=t, M=m, N=n)
            ctx.record(
                "model_extra_memory",
                model[arm]["extra_bytes"] / 2**20,
                "MiB",
                arm=arm,
                B=b,
                T=t,
                M=m,
                N=n,
            )
        labels.append(f"{b},{t},{m},{n}")
        for arm in ratios:
            ratios[arm].append(result.timings["nondp"].median / result.timings[arm].median)
        ctx.log(f"B,T,M,N={b},{t},{m},{n}: {result}")
        if (b, t, m, n) in memory_shapes:
            peaks = _peak_extra_rss(
                ctx.pick(
                    smoke=("explicit", "flashdp"),
                    quick=("explicit", "opacus", "flashdp"),  # each one a fresh torch import
                    full=ARMS,
                ),
                b,
                t,
                m,
                n,
            )
            for arm in peaks:
                ctx.record(
                    "peak_extra_rss",
                    peaks[arm],
                    "MiB",
                    baseline="flashdp",
                    baseline_value=peaks["flashdp"],
                    arm=arm,
                    B=b,
                    T=t,
                    M=m,
                    N=n,
                )
            ctx.log(f"peak extra RSS (MiB) at {b},{t},{m},{n}: {peaks}")
    plot_bars(
        labels,
        ratios,
        ctx.path("op_speed.png"),
        ylabel="non-DP time / arm time (higher is faster)",
        title="clipped weight gradient vs non-DP, 1 thread, B,T,M,N",
    )


def _windows(seq_len: int, count: int) -> torch.Tensor:
    """``count`` non-overlapping training windows of ``seq_len + 1`` bytes."""
    from neurips25_core.data import stdlib_corpus

    data = stdlib_corpus().train
    usable = (data.numel() // (seq_len + 1)) * (seq_len + 1)
    windows = data[:usable].view(-1, seq_len + 1)
    g = torch.Generator().manual_seed(0)
    pick = torch.randperm(windows.shape[0], generator=g)[:count]
    return windows[pick].long()


def _gpt2(width: int, seq_len: int, seed: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=256,
        n_embd=width,
        n_layer=2,
        n_head=4,
        n_positions=seq_len,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPT2LMHeadModel(cfg)


def _llama(width: int, seq_len: int, seed: int):
    from neurips25_core.models import tiny_llama, tiny_llama_config

    return tiny_llama(
        tiny_llama_config(
            hidden_size=width, num_layers=2, num_heads=4, max_position_embeddings=seq_len
        ),
        seed=seed,
    )


def _loss(model, ids):
    from .privacy import per_sample_lm_loss

    b, t = ids.shape[0], ids.shape[1] - 1
    # position ids carry the batch dim so the position embedding gets per-sample gradients
    pos = torch.arange(t).expand(b, t)
    return per_sample_lm_loss(model(input_ids=ids[:, :-1], position_ids=pos).logits, ids[:, 1:])


def _eval_loss(model, x, y):
    return _loss(model, torch.cat([x, y[:, -1:]], 1)).mean()


def build_arm(
    arm,
    arch,
    *,
    seq_len,
    expected_batch,
    sigma,
    clip,
    lr,
    width,
    seed=0,
    dtype=torch.float32,
    optimizer="adamw",
):
    """One arm's model, the module that is called (wrapped where the arm needs it), the optimizer."""
    from . import privacy

    model = (_gpt2 if arch == "gpt2" else _llama)(width, seq_len, seed).to(dtype)
    inner = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[optimizer]
    if arm == "nondp":
        return model, model, inner(model.parameters(), lr=lr, weight_decay=0.0)
    if arm == "opacus":
        from opacus import GradSampleModule
        from opacus.optimizers import DPPerLayerOptimizer

        net = GradSampleModule(model)
        k = sum(1 for p in model.parameters() if p.requires_grad)
        torch.manual_seed(seed + 1000)
        opt = DPPerLayerOptimizer(
            inner(net.parameters(), lr=lr, weight_decay=0.0),
            noise_multiplier=sigma,
            max_grad_norm=[clip] * k,
            expected_batch_size=round(expected_batch),
        )
        return model, net, opt
    backend = {"flashdp": "torch", "ghost": "ghost", "explicit": "explicit"}[arm]
    cfg = privacy.FlashDPConfig(max_grad_norm=clip, noise_multiplier=sigma, backend=backend)
    net = privacy.make_private(model, cfg)
    opt = privacy.DPOptimizer(
        inner(net.parameters(), lr=lr, weight_decay=0.0),
        net,
        cfg,
        expected_batch,
        generator=torch.Generator().manual_seed(seed + 1000),
    )
    return model, net, opt


def train_arm(
    arm,
    arch,
    data,
    *,
    steps,
    sample_rate,
    sigma,
    clip,
    lr,
    width,
    seed=0,
    progress=False,
    dtype=torch.float32,
    optimizer="adamw",
):
    """Train one arm; returns (model, stats)."""
    from neurips25_core.progress import progress_bar

    from . import privacy

    seq_len = data.shape[1] - 1
    model, net, opt = build_arm(
        arm,
        arch,
        seq_len=seq_len,
        expected_batch=sample_rate * data.shape[0],
        sigma=sigma,
        clip=clip,
        lr=lr,
        width=width,
        seed=seed,
        dtype=dtype,
        optimizer=optimizer,
    )
    tokens, start = 0, time.perf_counter()
    sampler = privacy.PoissonSampler(data.shape[0], sample_rate, steps, seed=seed)
    for idx in progress_bar(sampler, total=steps, desc=f"{arch}/{arm}", enabled=progress):
        if idx.numel() == 0 and arm == "opacus":
            continue  # opacus has no per-sample gradients to clip on an empty batch
        if idx.numel():
            _loss(net, data[idx]).mean().backward()
            tokens += idx.numel() * seq_len
        opt.step()
        opt.zero_grad()
    seconds = time.perf_counter() - start
    return model, {"tokens_per_s": tokens / seconds, "seconds": seconds}


def step_peak_bytes(
    arm: str, arch: str, ids: torch.Tensor, *, width: int, sigma: float, seed: int = 0
) -> int:
    """Peak extra live tensor bytes of one training step (forward, backward, optimizer step).

    The arm's model and optimizer are built fresh and take one warm-up step on ``ids``
    ((B, T + 1) token ids), so weights and optimizer state exist before the measured step and are
    not counted: what is counted is activations, saved tensors, per-sample gradients (Opacus) or
    clipped chunks (flashdp), gradients and transients, at their worst moment
    (:class:`neurips25_core.bench.LivePeak`).
    """
    _, net, opt = build_arm(
        arm,
        arch,
        seq_len=ids.shape[1] - 1,
        expected_batch=ids.shape[0],
        sigma=0.0 if arm == "nondp" else sigma,
        clip=1.0,
        lr=1e-3,
        width=width,
        seed=seed,
    )

    def step():
        _loss(net, ids).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    return peak_live_bytes(step)


def parameter_gaps(ours, theirs, width: int) -> dict[str, float]:
    """``‖p − q‖ / ‖q‖`` per parameter tensor of two same-architecture GPT-2 models.

    Every ``c_attn.bias`` (the fused q|k|v bias) also gets an entry ``...c_attn.bias[q,v]``
    without its key third: the loss is invariant to the key bias (it adds ``q·b_k`` to every
    logit of a softmax row), so its true gradient is exactly zero and what it receives is
    rounding noise.
    """
    gaps = {}
    with torch.no_grad():
        for (name, p), q in zip(ours.named_parameters(), theirs.parameters(), strict=True):
            gaps[name] = float((p - q).norm() / q.norm())
            if name.endswith("attn.c_attn.bias"):
                keep = torch.ones_like(q, dtype=torch.bool)
                keep[width : 2 * width] = False
                gaps[name + "[q,v]"] = float((p - q)[keep].norm() / q[keep].norm())
    return gaps


@SUITE.case("sigma0_gap", kind="quality")
def sigma0_gap(ctx: Context) -> None:
    """flashdp vs opacus DPPerLayerOptimizer at σ = 0: the largest parameter gap over 20 steps.

    Run with AdamW in float32 (the headline), AdamW in float64 and SGD in float32, to separate
    a difference in the gradients from fp32 rounding that AdamW amplifies.
    """
    width, seq = ctx.pick(smoke=16, quick=64, full=64), ctx.pick(smoke=16, quick=32, full=128)
    steps = ctx.pick(smoke=3, quick=20, full=20)
    data = _windows(seq, 1024)
    runs = [
        ("adamw", 1e-3, torch.float32),
        ("adamw", 1e-3, torch.float64),
        ("sgd", 0.1, torch.float32),
    ]
    for optimizer, lr, dtype in runs:
        kw = dict(
            steps=steps,
            sample_rate=16 / 1024,
            sigma=0.0,
            clip=1.0,
            lr=lr,
            width=width,
            dtype=dtype,
            optimizer=optimizer,
        )
        with single_thread():
            a, _ = train_arm("flashdp", "gpt2", data, **kw)
            b, _ = train_arm("opacus", "gpt2", data, **kw)
        gaps = parameter_gaps(a, b, width)
        whole = {k: v for k, v in gaps.items() if not k.endswith("[q,v]")}
        # the largest gap when every c_attn.bias is compared without its key third
        no_key = {k: v for k, v in gaps.items() if not k.endswith("attn.c_attn.bias")}
        worst, rest = max(whole, key=whole.get), max(no_key, key=no_key.get)
        common = dict(
            arm="flashdp",
            optimizer=optimizer,
            lr=lr,
            dtype=str(dtype).removeprefix("torch."),
            steps=steps,
            width=width,
            seq_len=seq,
            expected_batch=16,
        )
        ctx.record(
            "max_relative_param_gap", whole[worst], "rel", baseline="opacus", tensor=worst, **common
        )
        ctx.record(
            "max_relative_param_gap_without_key_bias",
            no_key[rest],
            "rel",
            baseline="opacus",
            tensor=rest,
            **common,
        )
        ctx.log(
            f"σ=0, {steps} steps, {optimizer} {common['dtype']}: largest relative parameter gap "
            f"flashdp vs opacus {whole[worst]:.2e} ({worst}); without the key bias "
            f"{no_key[rest]:.2e} ({rest})"
        )


@SUITE.case("dp_pretraining", kind="quality")
def dp_pretraining(ctx: Context) -> None:
    """The reduced reproduction: bits/byte, ε, tokens/s, step peak memory per arm at ε = 8."""
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import evaluate_bpb

    from .privacy import PrivacyAccountant

    # quick shrinks the batch and the sequence (B̄ 16 of 64 bytes) to fit 60 s on two cores;
    # the DP arms still see the same Poisson batches and ε = 8
    width, seq = ctx.pick(smoke=16, quick=64, full=64), ctx.pick(smoke=32, quick=64, full=128)
    count = ctx.pick(smoke=256, quick=4096, full=4096)
    batch = ctx.pick(smoke=16, quick=16, full=64)
    steps = ctx.pick(smoke=3, quick=40, full=300)
    arches = ctx.pick(smoke=["gpt2"], quick=["gpt2"], full=["gpt2", "llama"])
    arms = ctx.pick(smoke=list(ARMS), quick=["nondp", "flashdp", "opacus"], full=list(ARMS))
    q, delta, target = batch / count, 1e-5, 8.0
    data = _windows(seq, count)
    acc = PrivacyAccountant("rdp")
    sigma = acc.noise_multiplier_for(target, delta, q, steps)
    acc.step(sigma, q, steps)
    eps = acc.epsilon(delta)
    corpus = stdlib_corpus()
    bpb_of = {}
    for arch in arches:
        for arm in arms:
            s = 0.0 if arm == "nondp" else sigma
            # tiny matrices: one thread (two threads on a loaded machine are many times slower)
            with single_thread():
                model, stats = train_arm(
                    arm,
                    arch,
                    data,
                    steps=steps,
                    sample_rate=q,
                    sigma=s,
                    clip=1.0,
                    lr=1e-3,
                    width=width,
                    progress=True,
                )
            with torch.no_grad(), single_thread():
                bpb = evaluate_bpb(
                    model,
                    corpus,
                    batch_size=16,
                    seq_len=seq,
                    num_batches=ctx.pick(smoke=2, quick=8, full=20),
                    loss_fn=_eval_loss,
                )
            bpb_of[(arch, arm)] = bpb
            common = dict(
                arch=arch, arm=arm, steps=steps, sigma=round(s, 4), q=q, width=width, seq_len=seq
            )
            ctx.record(
                "val_bits_per_byte",
                bpb,
                "bits/byte",
                baseline="nondp" if arm != "nondp" else None,
                baseline_value=bpb_of.get((arch, "nondp")) if arm != "nondp" else None,
                **common,
            )
            ctx.record(
                "tokens_per_s", stats["tokens_per_s"], "tok/s", lower_is_better=False, **common
            )
            ctx.record("epsilon", math.inf if arm == "nondp" else eps, "eps", delta=delta, **common)
            ctx.log(
                f"{arch}/{arm}: {bpb:.4f} bits/byte, {stats['tokens_per_s']:.0f} tok/s, σ={s:.4f}, ε={eps if arm != 'nondp' else math.inf:.3f}"
            )
        # peak live tensor memory of one training step on the same B̄ sequences for every arm
        probe = data[:batch]
        with single_thread():
            peaks = {
                arm: step_peak_bytes(arm, arch, probe, width=width, sigma=sigma) / 2**20
                for arm in arms
            }
        for arm in arms:
            ctx.record(
                "step_peak_live_bytes",
                peaks[arm],
                "MiB",
                baseline="flashdp",
                baseline_value=peaks["flashdp"],
                arch=arch,
                arm=arm,
                batch=batch,
                width=width,
                seq_len=seq,
            )
        ctx.log(f"{arch}: peak live tensor MiB of one step at B={batch}, T={seq}: {peaks}")
    plot_bars(
        arms,
        {arch: [bpb_of[(arch, arm)] for arm in arms] for arch in arches},
        ctx.path("dp_pretraining.png"),
        ylabel="validation bits/byte",
        title=f"after {steps} steps, DP arms at eps = {eps:.2f}, delta = 1e-5",
    )
