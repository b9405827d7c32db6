"""The lope benchmark suite (``neurips25 bench lope``).

Every case runs in every mode (smoke / quick / full) and sizes itself with ``ctx.pick``; the
workspace tests run each case in smoke mode on an empty checkpoint cache. Cases:

- ``quality`` (the reduced reproduction, spec §5): every arm of ``lope.experiment`` on a byte
  Llama fine-tuned on synthetic instructions with a fraction of corrupted training examples;
- ``expert_mix_speed``: the single-GEMM ``expert_mix`` against the per-expert loop (HydraLoRA's
  form);
- ``layer_overhead_speed``: one adapted layer (peft LoRA, HydraLoRA, LoPE at inference) against
  the bare ``nn.Linear``, next to the cost model's prediction.
"""

from __future__ import annotations

import math

from neurips25_core.bench import Context, Suite, compare, plot_lines, single_thread

SUITE = Suite(
    name="lope",
    paper="Noise-Robustness Through Noise: A Framework Combining Asymmetric LoRA with Poisoning MoE",
    url="https://arxiv.org/abs/2505.23868",
)


@SUITE.case("expert_mix_speed", kind="speed")
def expert_mix_speed(ctx: Context) -> None:
    """``Σ_n g_n B_n h`` as one GEMM over K = N·r (ours) vs a loop of N GEMMs (baseline), 1 thread.

    Cost model: both do ``2·T·N·r·out`` FLOPs; the loop issues N GEMMs with K = r and N
    accumulations into the output, the single GEMM one GEMM with K = N·r plus forming ``g ⊗ h``
    (``T·N·r``). Outputs are checked equal (1e-6) before timing.
    """
    import torch

    from neurips25_core.testing import assert_close, randn

    from .ops import expert_mix
    from .reference import expert_mix_reference

    T = ctx.pick(smoke=64, quick=1024, full=4096)
    out_features = ctx.pick(smoke=96, quick=256, full=1024)
    rank, experts = 4, 4
    h = randn(T, rank, seed=0)
    gates = torch.softmax(randn(T, experts, seed=1), dim=-1)
    B = randn(experts, out_features, rank, seed=2)
    with torch.no_grad():
        assert_close(
            expert_mix(h, gates, B, 8.0),
            expert_mix_reference(h.double(), gates.double(), B.double(), 8.0),
            rtol=1e-6,
        )
        with single_thread():
            result = compare(
                {
                    "per-expert loop (baseline)": lambda: expert_mix_reference(h, gates, B, 8.0),
                    "single GEMM (ours)": lambda: expert_mix(h, gates, B, 8.0),
                },
                baseline="per-expert loop (baseline)",
                min_time=ctx.pick(smoke=0.01, quick=0.2, full=1.0),
            )
    result.record(ctx, T=T, out=out_features, r=rank, N=experts)


#: The arms the noise curve needs (the issue's LoPE ≥ HydraLoRA ≥ LoRA); the LoPE evaluations with
#: B_D kept and with K = 0 reuse the trained LoPE adapter (no training of their own).
CORE_ARMS = ("lora_r4", "hydralora", "lope", "lope_unmasked", "lope_k0")
#: The other baselines of the issue, measured at the paper's 10 % setting.
EXTRA_ARMS = ("lora_r2", "lora_r8", "hydralora_hynoise", "lora_neftune", "lope_equal_steps")

#: Per mode: the base Llama, the data, training length and ``runs``, a tuple of
#: ``(noise rate, seeds, arms)``: each arm is trained once per seed at that noise rate.
QUALITY_SIZES = {
    "smoke": dict(
        llama=dict(hidden_size=32, num_layers=1, num_heads=2),
        pretrain_steps=20,
        pretrain_batch=4,
        batch_size=16,
        n_train=200,
        n_test=30,
        n_val=30,
        router_examples=100,
        # The other arms train end to end in tests/test_experiment.py (every arm of ARMS).
        runs=((0.1, (0,), CORE_ARMS),),
        epochs=2,
        steps_per_stage=4,
        lrs=(5e-4, 2e-3),
    ),
    # The fixed points: 10 %, hidden 64, LoRA / HydraLoRA / LoPE, 150 steps per stage,
    # one seed. Sized to ≈ 40 s CPU on an empty cache (one thread): 2 layers (the issue fixes
    # only the width), batch 8, a 150-step base, 300 test examples, router mass on 300.
    "quick": dict(
        llama=dict(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=192),
        pretrain_steps=150,
        pretrain_batch=16,
        batch_size=8,
        n_train=4000,
        n_test=300,
        n_val=0,
        router_examples=300,
        runs=((0.1, (0,), CORE_ARMS),),
        epochs=2,
        steps_per_stage=150,
        lrs=(2e-3,),
    ),
    # Sized to ≈ 60–75 CPU-min (the issue says ≈ 60 min; every arm at 3 seeds × 4 rates would be
    # ≈ 2.5 h): the three arms of the headline at 10 % with seeds 0–2 and at 5/20/30 % with
    # seeds 0–1; the other baselines at 10 % with seeds 0–1. README "What differs from the issue".
    "full": dict(
        llama=dict(hidden_size=96, num_layers=4, num_heads=4, intermediate_size=256),
        pretrain_steps=600,
        pretrain_batch=16,
        batch_size=16,
        n_train=4000,
        n_test=1000,
        n_val=300,
        router_examples=1000,
        runs=(
            (0.05, (0, 1), CORE_ARMS),
            (0.1, (0, 1, 2), CORE_ARMS),
            (0.1, (0, 1), EXTRA_ARMS),
            (0.2, (0, 1), CORE_ARMS),
            (0.3, (0, 1), CORE_ARMS),
        ),
        epochs=2,
        steps_per_stage=None,
        lrs=(5e-4, 2e-3),
    ),
}


def noise_rates(size: dict) -> list[float]:
    """The noise rates of a size's ``runs``, ascending."""
    return sorted({rate for rate, _, _ in size["runs"]})


def size_arms(size: dict) -> list[str]:
    """Every arm a size's ``runs`` measures, in ``lope.experiment.ARMS`` order."""
    from .experiment import ARMS

    wanted = {arm for _, _, arms in size["runs"] for arm in arms}
    return [arm for arm in ARMS if arm in wanted]


LABELS = {
    "lora_r2": "LoRA r=2",
    "lora_r4": "LoRA r=4",
    "lora_r8": "LoRA r=8",
    "hydralora": "HydraLoRA",
    "hydralora_hynoise": "HydraLoRA+HyNoIse",
    "lora_neftune": "LoRA+NEFTune",
    "lope": "LoPE",
    "lope_unmasked": "LoPE unmasked",
    "lope_k0": "LoPE K=0",
    "lope_equal_steps": "LoPE equal steps",
}


@SUITE.case("quality", kind="quality")
def quality(ctx: Context) -> None:
    """Clean exact match after fine-tuning on noisy instructions: LoPE vs HydraLoRA vs LoRA (baseline).

    A byte Llama pretrained on the stdlib corpus (cached) is fine-tuned with r = 4 adapters on
    gate/up/down on synthetic instructions (six families) of which a fraction was corrupted
    (NCI/WOS/CD, input and target); every arm of ``lope.experiment.ARMS`` the mode lists runs on
    the same data. The learning rate is picked on LoRA r = 4 at 10 % noise on a clean validation
    set (``lrs``; one value: not swept) and used by every arm. Seeds: mean ± 95 % CI (Student t).
    The baseline of every headline is LoRA r = 4.
    """

    from neurips25_core.models import pretrained_tiny_llama, tiny_llama_config

    from .experiment import ArmData, run_arms
    from .noise import HyNoise
    from .tasks import corrupt_examples, evaluate, make_instructions

    size = QUALITY_SIZES[ctx.mode]
    progress = not ctx.smoke
    with single_thread():
        base = pretrained_tiny_llama(
            config=tiny_llama_config(**size["llama"]),
            steps=size["pretrain_steps"],
            batch_size=size["pretrain_batch"],
            **({"seq_len": 64} if ctx.smoke else {}),
            progress=progress,
        )
        clean_train = make_instructions(size["n_train"], seed=0)
        test = make_instructions(size["n_test"], seed=1)
        base_scores = evaluate(base, test)

        def arm_data(rate: float, seed: int) -> ArmData:
            train, flags = corrupt_examples(clean_train, rate, seed=seed)
            noise = HyNoise(seed=seed)
            hynoise = [(f, noise.corrupt(i), noise.corrupt(r)) for f, i, r in train]
            return ArmData(train=train, flags=flags, hynoise_train=hynoise, test=test)

        common = dict(
            epochs=size["epochs"],
            steps_per_stage=size["steps_per_stage"],
            batch_size=size["batch_size"],
            router_examples=size["router_examples"],
        )
        lr = size["lrs"][0]
        sweep = {}
        if len(size["lrs"]) > 1:
            val = make_instructions(size["n_val"], seed=2)
            data = arm_data(0.1, 0)
            for candidate in size["lrs"]:
                data.test = val
                got = run_arms(base, data, ["lora_r4"], lr=candidate, seed=0, **common)
                sweep[candidate] = got["lora_r4"]
            lr = max(sweep, key=lambda c: (sweep[c]["exact_match"], -sweep[c]["response_loss"]))
            for candidate, got in sweep.items():
                ctx.record(
                    "val_exact_match",
                    got["exact_match"],
                    "%",
                    lower_is_better=False,
                    arm="LoRA r=4",
                    lr=candidate,
                    noise=0.1,
                    picked=candidate == lr,
                )
        runs: dict[tuple[str, float], list[dict]] = {}
        for rate, seeds, arms in size["runs"]:
            for seed in seeds:
                ctx.log(f"lope quality: noise {rate:.0%}, seed {seed}, lr {lr:g}")
                got = run_arms(
                    base,
                    arm_data(rate, seed),
                    arms,
                    lr=lr,
                    seed=seed,
                    progress=progress,
                    **common,
                )
                for arm, metrics in got.items():
                    runs.setdefault((arm, rate), []).append(metrics)
    _record_quality(ctx, runs, size, lr, base_scores)


def _record_quality(ctx: Context, runs: dict, size: dict, lr: float, base_scores: dict) -> None:
    from .experiment import mean_ci95

    ctx.record(
        "exact_match",
        base_scores["exact_match"],
        "%",
        lower_is_better=False,
        arm="base model (no fine-tuning)",
        noise=0.0,
    )
    series: dict[str, list[float]] = {}
    errors: dict[str, list[float]] = {}
    rates = noise_rates(size)
    arms = size_arms(size)
    for rate in rates:
        baseline = runs.get(("lora_r4", rate))
        base_em = mean_ci95([m["exact_match"] for m in baseline])[0] if baseline else None
        for arm in arms:
            metrics = runs.get((arm, rate))
            if not metrics:
                continue
            label = LABELS[arm]
            params = dict(
                arm=label, noise=rate, lr=lr, seeds=len(metrics), steps=metrics[0]["steps"]
            )
            if "impl" in metrics[0]:
                params["impl"] = metrics[0]["impl"]
            em, em_ci = mean_ci95([m["exact_match"] for m in metrics])
            ctx.record(
                "exact_match",
                em,
                "%",
                baseline=None if arm == "lora_r4" else "LoRA r=4",
                baseline_value=None if arm == "lora_r4" else base_em,
                lower_is_better=False,
                ci95=em_ci,
                **params,
            )
            loss, loss_ci = mean_ci95([m["response_loss"] for m in metrics])
            ctx.record("response_loss", loss, "nats/byte", ci95=loss_ci, **params)
            for key, unit in (
                ("delta_A_stage1", "Frobenius"),
                ("delta_A_stage2", "Frobenius"),
                ("router_mass_clean", "fraction"),
                ("router_mass_noisy", "fraction"),
                ("train_seconds", "s CPU"),
            ):
                values = [m[key] for m in metrics if key in m and math.isfinite(m[key])]
                if values:
                    mean, ci = mean_ci95(values)
                    ctx.record(key, mean, unit, ci95=ci, **params)
            series.setdefault(label, []).append(em)
            errors.setdefault(label, []).append(em_ci)
    # The curve over noise: the arms measured at every rate.
    series = {k: v for k, v in series.items() if len(v) == len(rates)}
    errors = {k: v for k, v in errors.items() if k in series}
    if len(rates) > 1 and series:
        plot_lines(
            [100 * r for r in rates],
            series,
            ctx.path("quality_exact_match.png"),
            xlabel="corrupted training examples (%)",
            ylabel="clean exact match (%)",
            title="lope quality: mean ± 95 % CI over seeds",
            errors=errors,
        )


def layer_flops(T: int, d_in: int, d_out: int, rank: int, experts: int, compensate: bool) -> dict:
    """The spec's cost model (§6) of one adapted layer's forward, in FLOPs.

    Base ``2·T·in·out``; adapter ``2·T·r·(in + N·out)``; router ``2·T·in·N`` (absent for LoRA,
    N = 1); compensation forms the N expert outputs ``B_i h`` (``2·T·N·r·out``) and N cosines
    over ``out`` (``≈ 3·T·N·out``) on top of the mix.
    """
    base = 2 * T * d_in * d_out
    adapter = 2 * T * rank * (d_in + experts * d_out)
    router = 2 * T * d_in * experts if experts > 1 else 0
    comp = (2 * T * experts * rank * d_out + 3 * T * experts * d_out) if compensate else 0
    return {"base": base, "adapter": adapter, "router": router, "compensation": comp}


@SUITE.case("layer_overhead_speed", kind="speed")
def layer_overhead_speed(ctx: Context) -> None:
    """Forward time of one adapted layer vs the bare ``nn.Linear`` (baseline), 1 thread, no grad.

    Arms: peft's LoRA r = 4 (the peer; skipped with a message without the ``peers`` extra),
    HydraLoRA (N = 4, ours), LoPE at inference (N = 4, B_D masked and compensated, K = N − 1) and
    LoPE with K = 0 (masking only). Every adapter's output is first checked equal to the base's
    with zero ``B`` (1e-6), then ``B`` is filled at random and timed. The cost model's predicted
    time ratio (FLOPs over the base's) is recorded next to each measured ratio.
    """
    import torch
    from torch import nn

    from neurips25_core.testing import assert_close, randn

    from .experiment import peft_available
    from .layer import AsymmetricLoRALinear

    T = ctx.pick(smoke=64, quick=512, full=2048)
    d_in, d_out = ctx.pick(smoke=(96, 256), quick=(256, 688), full=(512, 1376))
    rank, experts = 4, 4
    torch.manual_seed(0)
    base = nn.Linear(d_in, d_out)
    x = randn(T, d_in, seed=1)
    arms: dict[str, tuple[nn.Module, int, bool]] = {}
    if peft_available():
        from peft import LoraConfig
        from peft import get_peft_model as peft_get_peft_model

        holder = nn.Sequential()
        holder.add_module("proj", copy_linear(base))
        lora = peft_get_peft_model(
            holder, LoraConfig(r=rank, lora_alpha=32, lora_dropout=0.0, target_modules=["proj"])
        )
        arms["peft LoRA r=4 (peer)"] = (lora, 1, False)
    else:
        ctx.log("layer_overhead_speed: peft is not installed (the `peers` extra): LoRA skipped")
    hydra = AsymmetricLoRALinear(copy_linear(base), rank, experts, poison=())
    lope = AsymmetricLoRALinear(copy_linear(base), rank, experts, poison=(3,))
    lope_k0 = AsymmetricLoRALinear(copy_linear(base), rank, experts, poison=(3,), compensation_k=0)
    for layer in (lope, lope_k0):
        layer.set_mode("inference")
    arms["HydraLoRA N=4"] = (hydra, experts, False)
    arms["LoPE inference K=3"] = (lope, experts, True)
    arms["LoPE inference K=0"] = (lope_k0, experts, True)
    for module, _, _ in arms.values():
        module.eval()
    with torch.no_grad():
        want = base(x)
        for name, (module, _, _) in arms.items():
            assert_close(module(x), want, rtol=1e-6, name=name)
        for module, _, _ in arms.values():
            for pname, p in module.named_parameters():
                if "lora_B" in pname:
                    p.copy_(randn(*p.shape, seed=3) * 0.1)
        with single_thread():
            fns = {"nn.Linear (baseline)": lambda: base(x)}
            fns.update({name: (lambda m=module: m(x)) for name, (module, _, _) in arms.items()})
            result = compare(
                fns,
                baseline="nn.Linear (baseline)",
                min_time=ctx.pick(smoke=0.01, quick=0.2, full=1.0),
            )
    result.record(ctx, T=T, d_in=d_in, d_out=d_out, r=rank, N=experts)
    for name, (_, n, comp) in arms.items():
        flops = layer_flops(T, d_in, d_out, rank, n, comp)
        ctx.record(
            "cost_model_time_ratio",
            sum(flops.values()) / flops["base"],
            "x base",
            arm=name,
            measured=result.timings[name].median / result.timings["nn.Linear (baseline)"].median,
            T=T,
            d_in=d_in,
            d_out=d_out,
        )


def copy_linear(layer):
    """A fresh ``nn.Linear`` with the same weights (each arm wraps its own copy)."""
    import copy

    return copy.deepcopy(layer)
