"""The η* fit, the slope, and the coordinate check across depth (Done-when thresholds)."""

import math

import pytest
import torch
from completep import ParamConfig, param_groups, parameterize, scaled_config
from completep.bench import SUITE
from completep.diagnostics import coord_check, fit_optimal_lr, loglog_slope
from transformers import LlamaForCausalLM

from neurips25_core.data import stdlib_corpus
from neurips25_core.models import tiny_llama_config


def test_fit_optimal_lr_vertex_edge_flat():
    lrs = [2.0**k for k in range(-8, -3)]
    losses = [(math.log2(lr) + 5.3) ** 2 + 1 for lr in lrs]
    assert fit_optimal_lr(lrs, losses)["log2_lr"] == pytest.approx(-5.3)
    assert fit_optimal_lr(lrs, sorted(losses))["edge"]
    diverged = fit_optimal_lr(lrs, [3.0, 2.0, 1.0, math.inf, math.nan])
    assert diverged["flat"] and diverged["log2_lr"] == -6
    with pytest.raises(ValueError, match="losses"):
        fit_optimal_lr(lrs, [1.0])


def test_loglog_slope():
    assert loglog_slope([2, 4, 8, 16], [-5.0, -5.5, -6.0, -6.5]) == pytest.approx(-0.5)
    assert math.isnan(loglog_slope([2], [1.0]))


def test_suite_cases_have_all_modes():
    assert SUITE.name == "completep"
    assert {c.name for c in SUITE.cases} == {
        "lr_transfer_depth",
        "arm_sp_lr_transfer",
        "arm_completep_lr_transfer",
        "arm_mup_lr_transfer",
        "arm_depth_mup_lr_transfer",
        "linearization",
        "coord_check_depth",
        "speed_step",
    }
    assert all("smoke" in c.modes for c in SUITE.cases)


def test_linear_decay_schedule_keeps_group_ratios():
    """A's schedule: 10 % linear warm-up, linear decay to 10 %, every group keeping lr_scale."""
    from completep.bench import _linear_decay

    factor = _linear_decay(100, 10)
    assert [factor(s) for s in (0, 9)] == pytest.approx([0.1, 1.0])
    assert factor(10) == pytest.approx(1.0)
    assert factor(55) == pytest.approx(0.55)
    assert factor(100) == pytest.approx(0.1)
    base = tiny_llama_config(hidden_size=16, num_layers=2, num_heads=2, intermediate_size=64)
    model = LlamaForCausalLM(scaled_config(base, 32, 4))
    cfg = ParamConfig(kind="completep", base_width=16, base_depth=2)
    parameterize(model, cfg)
    opt = torch.optim.AdamW(param_groups(model, cfg, lr=1e-2))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    for _ in range(55):
        opt.step()
        sched.step()
    for group in opt.param_groups:
        assert group["lr"] == pytest.approx(1e-2 * group["lr_scale"] * 0.55)


def _last_block_ratio(kind, depths=(2, 16), steps=5):
    corpus = stdlib_corpus()
    base = tiny_llama_config(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=128)
    gen = torch.Generator().manual_seed(0)
    batches = [corpus.get_batch("train", 4, 32, generator=gen) for _ in range(steps)]
    cfg = ParamConfig(kind=kind, base_width=32, base_depth=depths[0])

    def make(depth):
        torch.manual_seed(0)
        model = LlamaForCausalLM(scaled_config(base, 32, depth))
        parameterize(model, cfg, generator=torch.Generator().manual_seed(0))
        return model

    records = coord_check(
        make,
        depths,
        lambda s: batches[s],
        lambda m: torch.optim.AdamW(param_groups(m, cfg, lr=1e-3), betas=(0.9, 0.95)),
        steps=steps,
    )
    last = {
        r["size"]: r["value"] for r in records if r["site"] == "last_block" and r["step"] == steps
    }
    return last[depths[1]] / last[depths[0]]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["depth_mup", "completep"])
def test_coord_check_depth_flat_for_depth_aware(kind):
    assert _last_block_ratio(kind) < 1.5


@pytest.mark.slow
def test_coord_check_depth_grows_for_sp():
    assert _last_block_ratio("sp") > 2.0


def test_linearization_distance_bad_alpha():
    from completep.linearization import linearization_distance

    with pytest.raises(ValueError, match="alpha"):
        linearization_distance(1.5, [2], [0])
    with pytest.raises(ValueError, match="depths"):
        linearization_distance(1.0, [0], [0])
    with pytest.raises(ValueError, match="step"):
        linearization_distance(1.0, [2], [0], step="second")
    with pytest.raises(ValueError, match="step"):
        linearization_distance(1.0, [2], [0], step=None)


def test_linearization_first_weight_step_is_linear():
    """Stepping W1 alone moves a ReLU branch exactly along its linearization (no kink crossed)."""
    from completep.linearization import linearization_distance

    first = linearization_distance(1.0, [2, 8], [0, 1], width=16, batch=8, step="first")
    both = linearization_distance(1.0, [2, 8], [0, 1], width=16, batch=8, step="both")
    assert max(max(v) for v in first.values()) < 1e-12
    assert min(min(v) for v in both.values()) > 1e-12


def test_linearization_notebook_reading_is_first_order_in_the_step():
    """The official notebook's "first-order term" sums delta_w[0, :] * grad (a broadcast), so its
    remainder is first order in the step (halving lr halves it) while the exact reading's remainder
    is second order (halving lr quarters it); this is why the two give different depth slopes."""
    from completep.linearization import linearization_distance

    kw = dict(width=16, batch=8)
    for step, power in (("notebook", 1), ("both", 2)):
        full = linearization_distance(1.0, [2, 8], [0, 1], step=step, **kw)
        half = linearization_distance(1.0, [2, 8], [0, 1], step=step, lr_base=0.5e-4, **kw)
        for depth in full:
            for a, b in zip(full[depth], half[depth], strict=True):
                assert a / b == pytest.approx(2.0**power, rel=1e-2)


def _width_ratios(kind, widths=(32, 128), steps=10, lr=1e-2):
    """max/min over widths of each site's mean |x| at the last step (the official width check's
    HPs: lr 1e-2, wd 0.1, betas (0.9, 0.95), clip 1; depth 2 = base depth, one seed)."""
    corpus = stdlib_corpus()
    base = tiny_llama_config(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=128)
    gen = torch.Generator().manual_seed(100)
    batches = [corpus.get_batch("train", 8, 64, generator=gen) for _ in range(steps)]
    cfg = ParamConfig(kind=kind, base_width=32, base_depth=2)

    def make(width):
        torch.manual_seed(0)
        model = LlamaForCausalLM(scaled_config(base, width, 2))
        parameterize(model, cfg, generator=torch.Generator().manual_seed(0))
        return model

    records = coord_check(
        make,
        widths,
        lambda s: batches[s],
        lambda m: torch.optim.AdamW(
            param_groups(m, cfg, lr=lr, weight_decay=0.1, eps=1e-12), betas=(0.9, 0.95)
        ),
        steps=steps,
    )
    out = {}
    for site in ("attn.0", "mlp.0", "attn.1", "mlp.1", "last_block"):
        vals = [r["value"] for r in records if r["site"] == site and r["step"] == steps]
        out[site] = max(vals) / min(vals)
    return out


@pytest.mark.slow
def test_coord_check_width_mup_far_flatter_than_sp():
    """Not the issue's 2x criterion (measured and not met at widths 32-256, see the README):
    every in-block site drifts at least 5x less over a 4x width range under μP than under SP,
    which a wrong width multiplier would break."""
    sp, mup = _width_ratios("sp"), _width_ratios("mup")
    for site in sp:
        assert sp[site] > 5 * mup[site], (site, sp[site], mup[site])


@pytest.mark.slow  # ~50 s of CPU: 20 seeds x widths 32-256 (results/width_coord_check)
def test_coord_check_width_within_2x_over_20_seeds():
    """Issue 27's "widths 32-256 within 2x" for μP (= CompleteP at the base depth), every site, at
    the official width check's HPs, averaged over 20 seeds as the official check averages over
    seeds (5 seeds left attn.0 at 2.19x; the 20-seed standard error at width 32 is ~11 %)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "benchmarks" / "width_coord_check.py"
    spec = importlib.util.spec_from_file_location("completep_width_cc", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.main(["--seeds", "20", "--kinds", "mup", "--widths", "32,64,128,256"])
    ratios = {k: v for k, v in out["max_over_min"].items() if k.endswith("/step10")}
    assert len(ratios) == len(module.SITES)
    assert max(ratios.values()) < 2.0, ratios
