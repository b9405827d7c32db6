"""The mambaspectrum benchmark suite (``neurips25 bench mambaspectrum``).

``length_extension`` (quality): a tiny Mamba-1 and a tiny Mamba-2 trained here at a short context on the stdlib
corpus, then perplexity at up to 8x (quick) / 32x (full) the training length for vanilla, the
MambaExtend ``delta`` baseline, ``spectrum`` (the paper) and ``a_linear``, each SPSA-calibrated
with the same budget. ``scan_speed`` (speed): HF's slow path, mambapy and the chunked scan on a
mamba-130m-shaped layer.
"""

from __future__ import annotations

import json
import statistics
import time

import torch

from neurips25_core.bench import Context, Suite, compare, plot_lines, single_thread

SUITE = Suite(
    name="mambaspectrum",
    paper="Mamba Modulation: On the Length Generalization of Mamba Models",
    url="https://arxiv.org/abs/2509.19633",
)

MODES = ("vanilla", "delta", "spectrum", "a_linear")


def _trained_mamba(ctx: Context, seed: int, family: str = "mamba1"):
    from transformers import Mamba2Config, Mamba2ForCausalLM, MambaConfig, MambaForCausalLM

    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import cached_checkpoint, train, train_arguments

    from .scaler import patch_fast_forward, unpatch_fast_forward

    hidden = ctx.pick(smoke=32, quick=64, full=128)
    layers = ctx.pick(smoke=1, quick=2, full=4)
    seq_len = ctx.pick(smoke=32, quick=128, full=128)
    # quick trains 100 steps (the 300 took ~80 s of the quick run's minute alone)
    steps = ctx.pick(smoke=15, quick=100, full=1500)
    # quick trains on 4 sequences per step (16 in full): ~5 s per 16x128 step on a loaded 2-core box
    batch = ctx.pick(smoke=16, quick=4, full=16)
    if family == "mamba1":
        cfg = MambaConfig(
            vocab_size=256, hidden_size=hidden, num_hidden_layers=layers, state_size=16, expand=2
        )
        cls = MambaForCausalLM
    else:  # Mamba-2: heads of 64 channels (4 x 64 in full), state 32, one group
        cfg = Mamba2Config(
            vocab_size=256,
            hidden_size=hidden,
            num_hidden_layers=layers,
            state_size=ctx.pick(smoke=16, quick=32, full=32),
            num_heads=2 * hidden // 64 if hidden >= 64 else 1,
            head_dim=64 if hidden >= 64 else 2 * hidden,
            n_groups=1,
            expand=2,
            chunk_size=seq_len,
        )
        cls = Mamba2ForCausalLM
    fast = family == "mamba1"  # Mamba-2 trains through transformers' torch SSD path
    corpus = stdlib_corpus()
    kwargs = dict(
        steps=steps, lr=2e-3, batch_size=batch, seq_len=seq_len, seed=seed, progress=False
    )

    def build():
        torch.manual_seed(seed)
        model = cls(cfg)
        if fast:
            patch_fast_forward(model)
        t0 = time.perf_counter()
        with single_thread():
            result = train(model, corpus, **kwargs)
        if fast:
            unpatch_fast_forward(model)
        return model.state_dict(), {
            "final_loss": float(result.losses[-1]),
            "seconds": time.perf_counter() - t0,
        }

    key = {
        "config": cfg.to_dict(),
        "data": corpus.fingerprint,
        "train": train_arguments(**kwargs),
        "seed": seed,
    }
    state, meta = cached_checkpoint(f"mambaspectrum_{family}", key, build)
    model = cls(cfg)
    model.load_state_dict(state, strict=True)
    model.eval()
    return (patch_fast_forward(model) if fast else model), corpus, seq_len, meta


def _windows(data: torch.Tensor, n: int, length: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, data.numel() - length - 1, (n,), generator=g)
    return data[starts[:, None] + torch.arange(length)[None]].long()


@SUITE.case("length_extension", kind="quality")
def length_extension(ctx: Context) -> None:
    """Perplexity vs length for vanilla / delta / spectrum / a_linear, SPSA-calibrated per target
    length, on a Mamba-1 and a Mamba-2 (``delta`` is Mamba-1 only here)."""
    for family in ("mamba1", "mamba2"):
        _length_extension(ctx, family)


def _length_extension(ctx: Context, family: str) -> None:
    from .calibrate import calibrate_spsa
    from .eval import ppl_vs_length
    from .scaler import Scaler, state_norms

    seeds = ctx.pick(smoke=[0], quick=[0], full=[0, 1, 2])
    iters = ctx.pick(smoke=2, quick=5, full=30)
    n_calib, n_eval = 4, ctx.pick(smoke=2, quick=4, full=10)
    # MambaExtend's delta on Mamba-2 needs a patched mixer (dt after softplus): not built.
    modes = MODES if family == "mamba1" else tuple(m for m in MODES if m != "delta")
    if family == "mamba2":
        print("length_extension: 'delta' is not built for Mamba-2; its Mamba-2 rows are skipped")
    table = {}  # (mode, calib_len) -> length -> [ppl per seed]
    scales_out, norms_out, train_meta = {}, {}, {}
    for seed in seeds:
        model, corpus, l_train, meta = _trained_mamba(ctx, seed, family)
        train_meta[seed] = meta
        factors = ctx.pick(smoke=[1, 2, 4], quick=[1, 2, 4, 8], full=[1, 2, 4, 8, 16, 32])
        lengths = [l_train * f for f in factors]
        targets = ctx.pick(
            smoke=[lengths[-1]], quick=[lengths[-1]], full=[l_train * 8, l_train * 32]
        )
        val = corpus.split("val")
        # The validation files are split in two: calibration (first half), evaluation (second half).
        calib_data, eval_data = val[: val.numel() // 2], val[val.numel() // 2 :]
        eval_ids = _windows(eval_data, n_eval, lengths[-1], seed=1000 + seed)
        with single_thread():
            vanilla = ppl_vs_length(model, eval_ids, lengths)
            for target in targets:
                table.setdefault(("vanilla", target), {})
                for t, p in vanilla.items():
                    table[("vanilla", target)].setdefault(t, []).append(p)
            if family == "mamba1":
                norms_out[(seed, "vanilla")] = state_norms(model, eval_ids[:2], lengths)
            for mode in modes[1:]:
                for target in targets:
                    calib_ids = _windows(calib_data, n_calib, target, seed=2000 + seed)
                    scaler = Scaler(model, mode=mode)
                    res = calibrate_spsa(model, calib_ids, scaler, iters=iters, seed=seed)
                    ppl = ppl_vs_length(model, eval_ids, lengths)
                    if family == "mamba1" and mode == "spectrum" and target == targets[-1]:
                        norms_out[(seed, "spectrum")] = state_norms(model, eval_ids[:2], lengths)
                    scaler.reset()
                    scales_out[(seed, mode, target)] = [round(float(s), 4) for s in res.scales]
                    table.setdefault((mode, target), {})
                    for t, p in ppl.items():
                        table[(mode, target)].setdefault(t, []).append(p)
    for (mode, target), by_len in table.items():
        for length, vals in by_len.items():
            mean = statistics.fmean(vals)
            std = statistics.stdev(vals) if len(vals) > 1 else 0.0
            base = statistics.fmean(table[("vanilla", target)][length])
            ctx.record(
                "ppl",
                mean,
                "ppl",
                baseline=None if mode == "vanilla" else "vanilla",
                baseline_value=None if mode == "vanilla" else base,
                model=family,
                mode=mode,
                calib_len=target,
                length=length,
                x_train=length // l_train,
                std=round(std, 4),
                seeds=len(vals),
                spsa_iters=iters,
            )
    for target in targets:
        plot_lines(
            lengths,
            {m: [statistics.fmean(table[(m, target)][t]) for t in lengths] for m in modes},
            ctx.path(f"ppl_vs_length_{family}_calib{target}.png"),
            xlabel="evaluation length (bytes)",
            ylabel="perplexity",
            title=f"{family}, L_train={l_train}, SPSA at {target}",
            logx=True,
        )
    seed0 = seeds[0]
    if family == "mamba1":
        _plot_norms(ctx, norms_out, seed0, lengths)
    out = {}
    if family != "mamba1" and ctx.path("length_extension.json").exists():  # mamba1 runs first
        out = json.loads(ctx.path("length_extension.json").read_text())
    out[family] = {
        "l_train": l_train,
        "lengths": lengths,
        "targets": targets,
        "spsa_iters": iters,
        "ppl": {f"{m}@{t}": {str(k): v for k, v in d.items()} for (m, t), d in table.items()},
        "scales": {f"seed{s}/{m}@{t}": v for (s, m, t), v in scales_out.items()},
        "state_norms": {f"seed{s}/{w}": v for (s, w), v in norms_out.items()},
        "train": {str(k): v for k, v in train_meta.items()},
    }
    with open(ctx.path("length_extension.json"), "w") as f:
        json.dump(out, f, indent=1)


def _plot_norms(ctx: Context, norms_out: dict, seed0: int, lengths: list) -> None:
    series = {}
    for which in ("vanilla", "spectrum"):
        for layer, maxs in enumerate(norms_out[(seed0, which)]["max"]):
            series[f"{which} layer {layer}"] = maxs
    plot_lines(
        lengths,
        series,
        ctx.path("state_norms.png"),
        xlabel="length",
        ylabel="max channel ||h_T||",
        title="state norms (spectrum: SPSA at the longest target)",
        logx=True,
    )


def _mambapy_available() -> bool:
    try:
        import mambapy.pscan  # noqa: F401
    except ImportError:
        return False
    return True


@SUITE.case("scan_speed", kind="speed")
def scan_speed(ctx: Context) -> None:
    """Tokens/s of HF's slow-path scan, mambapy's pscan and the chunked scan (mamba-130m layer)."""
    from transformers.models.mamba.modeling_mamba import mamba_selective_scan

    from .scan import selective_scan

    d_inner, n = ctx.pick(smoke=(64, 16), quick=(1536, 16), full=(1536, 16))
    lengths = ctx.pick(smoke=[256], quick=[1024], full=[1024, 4096, 16384])
    peer = _mambapy_available()
    if not peer:
        print(
            "scan_speed: mambapy not installed (uv sync --extra peers); the mambapy column is skipped"
        )
    g = torch.Generator().manual_seed(0)
    for length in lengths:
        u = torch.randn(1, d_inner, length, generator=g)
        delta = torch.nn.functional.softplus(torch.randn(1, d_inner, length, generator=g) - 3)
        A = -torch.exp(torch.randn(d_inner, n, generator=g))
        B = torch.randn(1, n, length, generator=g)
        C = torch.randn(1, n, length, generator=g)
        args = (u, delta, A, B, C)
        fns = {
            "hf_slow": lambda args=args: mamba_selective_scan(*args),
            "chunked": lambda args=args: selective_scan(*args, backend="chunked"),
        }
        if peer:
            fns["mambapy"] = lambda args=args: mamba_selective_scan(*args, use_mambapy=True)
        with torch.no_grad(), single_thread():
            ref = fns["hf_slow"]()
            for name, fn in fns.items():
                err = float((fn() - ref).norm() / ref.norm())
                if not err < 1e-4:
                    raise AssertionError(f"{name} differs from hf_slow by {err:.2e} at L={length}")
            result = compare(
                fns,
                baseline="hf_slow",
                min_time=ctx.pick(smoke=0.01, quick=0.3, full=1.0),
                min_rounds=ctx.pick(smoke=2, quick=2, full=5),
                max_time=ctx.pick(smoke=0.5, quick=1.0, full=30.0),
            )
        result.record(ctx, L=length, d_inner=d_inner, N=n, mambapy="yes" if peer else "absent")
        for name, t in result.timings.items():
            ctx.record(
                "tokens_per_s",
                length / t.median,
                "tok/s",
                lower_is_better=False,
                impl=name,
                L=length,
            )
