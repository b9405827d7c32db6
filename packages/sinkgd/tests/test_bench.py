"""The benchmark suite's pieces and the GPU script (at toy size, Triton through the interpreter)."""

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch
from sinkgd.bench import SUITE, _meta_state_bytes, make_optimizer, muon_available, tokens_to_target

GPU_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


def test_suite_declares_quality_memory_and_speed():
    assert SUITE.name == "sinkgd"
    assert {c.name: c.kind for c in SUITE.cases} == {
        "quality": "quality",
        "control": "quality",
        "memory": "speed",
        "speed": "speed",
    }
    assert all(set(c.modes) == {"smoke", "quick", "full"} for c in SUITE.cases)


def test_tokens_to_target_interpolates():
    curve = [(100, 3.0), (200, 2.0), (300, 1.5)]
    assert tokens_to_target(curve, 2.5) == pytest.approx(150.0)
    assert tokens_to_target(curve, 3.5) == 100.0
    assert tokens_to_target(curve, 1.0) is None


@pytest.mark.parametrize("name", ["sinkgd", "swan", "adamw", "adamw_split", "sgd", "muon"])
def test_benchmark_optimizers_train_with_an_lr_schedule(name):
    if name == "muon" and not muon_available():
        pytest.skip("torch.optim.Muon is absent in this torch")
    from neurips25_core.models import tiny_llama, tiny_llama_config, train

    model = tiny_llama(
        tiny_llama_config(hidden_size=32, num_layers=1, num_heads=4, intermediate_size=48)
    )
    opt = make_optimizer(name, model, 1e-3)
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    before = [p.detach().clone() for p in model.parameters()]
    result = train(model, lambda step: (x, x), 3, optimizer=opt, progress=False)
    assert len(result.losses) == 3 and all(math.isfinite(v) for v in result.losses)
    assert result.lrs[2] < result.lrs[0]  # the cosine schedule reached the optimizer's groups
    changed = [not torch.equal(b, p) for b, p in zip(before, model.parameters())]
    assert all(changed)


def test_meta_state_bytes_on_a_galore_like_shape():
    from neurips25_core.models import tiny_llama_config

    cfg = tiny_llama_config(
        hidden_size=64, intermediate_size=176, num_heads=4, num_layers=2, vocab_size=1000
    )
    params, adam = _meta_state_bytes(cfg, "adamw")
    _, sink = _meta_state_bytes(cfg, "sinkgd")
    _, sgd = _meta_state_bytes(cfg, "sgd")
    assert adam == 8 * params
    matrix = 2 * (4 * 64 * 64 + 3 * 64 * 176)
    assert sink == 8 * (params - matrix)
    assert sgd == 0


def test_gpu_script_runs_at_toy_size(tmp_path):
    spec = importlib.util.spec_from_file_location("sinkgd_gpu_script", GPU_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "gpu.json"
    results = module.main(["--toy", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["toy"] is True and saved["correctness"]
    for row in results["correctness"]:
        tol = 1e-5 if row["dtype"] == "float32" else 1.6e-2
        assert row["triton_vs_torch"] <= tol, row
        assert row["triton_vs_fp64"] <= tol, row
    names = {r["optimizer"] for r in results["step_speed"]}
    assert {"SinkGD L=5 triton", "SWAN"} <= names


def _fake_run(name, lr, seed, best_lr=1e-3, speed=1.0, diverge_above=None):
    # loss improves at ``speed``; best_lr is the arm's best; above diverge_above the run diverges
    if diverge_above is not None and lr > diverge_above:
        return {
            "name": name,
            "lr": lr,
            "seed": seed,
            "val_loss": math.inf,
            "curve": [],
            "tokens": 8000,
            "diverged": True,
        }
    penalty = abs(math.log2(lr / best_lr)) * 0.05
    curve = [(k * 1000, 4.0 - speed * k * 0.1 + penalty + 0.01 * seed) for k in range(1, 9)]
    return {
        "name": name,
        "lr": lr,
        "seed": seed,
        "steps": 8,
        "val_loss": curve[-1][1],
        "curve": curve,
        "tokens": 8000,
        "seconds": 0.0,
        "diverged": False,
    }


def test_sweep_extends_an_edge_best_and_runs_every_seed_at_the_best():
    from sinkgd.bench import run_sweep

    calls = []

    def train(arm, lr, seed):
        calls.append((arm, lr, seed))
        best = {"a": 1e-3, "b": 3.2e-2, "c": 2e-3}[arm]  # b's best is far above its grid
        return _fake_run(arm, lr, seed, best_lr=best)

    sweep = {
        "a": ((5e-4, 1e-3, 2e-3), (0, 1)),
        "b": ((1e-3, 2e-3, 4e-3), (0,)),
        "c": ((2e-3,), (0,)),
    }
    runs, best = run_sweep(sweep, (0, 1, 2), train, progress=False)
    assert best["a"] == 1e-3  # interior: no extension
    assert {lr for a, lr, _ in calls if a == "a"} == {5e-4, 1e-3, 2e-3}
    # b's best was the top edge: extended twice (×2 each), the best is the last point reached
    assert sorted({lr for a, lr, s in calls if a == "b" and s == 0}) == pytest.approx(
        [1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2]
    )
    assert best["b"] == pytest.approx(1.6e-2)
    # every arm's best lr runs at every seed, the grid points only at the arm's own seeds
    for arm in "abc":
        assert {s for a, lr, s in calls if a == arm and lr == best[arm]} == {0, 1, 2}
    assert {s for a, lr, s in calls if a == "a" and lr == 5e-4} == {0, 1}
    assert len(runs) == len(calls) == len(set(calls))


@pytest.mark.parametrize("mode", ["quick", "full"])
def test_quality_case_aggregates_runs(mode, tmp_path, monkeypatch):
    """The quality case's sweep/seed/tokens-to-target bookkeeping, with training replaced by curves."""
    import sinkgd.bench as bench

    from neurips25_core.bench import Context

    def fake_train_one(name, lr, seed, steps, size, batch_size, seq_len, evals):
        assert size == {"smoke": "toy", "quick": "quick", "full": "spec"}[mode]
        # SinkGD improves twice as fast as AdamW; lr 1e-3 is every optimizer's best; SGD diverges
        # above 0.5
        speed = 2.0 if name == "sinkgd" else 1.0
        return _fake_run(
            name,
            lr,
            seed,
            best_lr=1e-3 if name != "sgd" else 0.5,
            speed=speed,
            diverge_above=0.5 if name == "sgd" else None,
        )

    monkeypatch.setattr(bench, "train_one", fake_train_one)
    ctx = Context(suite="sinkgd", case="quality", mode=mode, out_dir=tmp_path)
    bench.quality(ctx)
    by_metric = {}
    for r in ctx.results:
        by_metric.setdefault(r.metric, []).append(r)
    ratios = [
        r for r in by_metric["tokens_to_best_adamw_loss"] if r.params["optimizer"] == "sinkgd"
    ]
    # AdamW ends at 3.2 (+0.01·seed); SinkGD crosses it at 4000 tokens (+ a sliver): half the tokens
    assert all(r.value == pytest.approx(0.5, abs=0.01) for r in ratios)
    assert len(ratios) == (3 if mode == "full" else 1)
    best_rows = [r for r in by_metric["val_loss"] if r.params["best"]]
    assert {r.params["optimizer"]: r.params["lr"] for r in best_rows}["adamw"] == 1e-3
    assert all(r.baseline.startswith("AdamW lr=0.001") for r in by_metric["val_loss"])
    if mode == "full":
        assert {r.params["optimizer"] for r in best_rows} == set(bench.FULL_SWEEP) - (
            set() if bench.muon_available() else {"muon"}
        )
        assert all(r.params["seeds"] == 3 for r in best_rows)
        adamw_rows = [r for r in by_metric["val_loss"] if r.params["optimizer"] == "adamw"]
        assert len(adamw_rows) >= 4 and sum(r.params["seeds"] for r in adamw_rows) >= 6
        assert (
            len(
                {r.params["lr"] for r in by_metric["val_loss"] if r.params["optimizer"] == "sinkgd"}
            )
            >= 3
        )
        sgd = {r.params["lr"]: r for r in by_metric["val_loss"] if r.params["optimizer"] == "sgd"}
        assert sgd[1.0].params["diverged"] == 1 and math.isnan(sgd[1.0].value)
        assert sgd[0.5].params["best"]
        means = {r.params["optimizer"]: r for r in by_metric["tokens_to_best_adamw_loss_mean"]}
        assert means["sinkgd"].value == pytest.approx(0.5, abs=0.01)
        assert means["swan"].params["seeds"] == 3
        table = (tmp_path / "quality_sweep.md").read_text()
        assert "| AdamW | 0.004 |" in table and "div" in table
    runs = (tmp_path / "quality_runs.jsonl").read_text().splitlines()
    assert len(runs) == sum(r.params["seeds"] for r in by_metric["val_loss"])
    assert (tmp_path / "quality_val_loss.png").exists()
    assert (tmp_path / "quality_lr_sweep.png").exists()


def test_control_case_sweeps_the_split_adamw(tmp_path, monkeypatch):
    import sinkgd.bench as bench

    from neurips25_core.bench import Context

    monkeypatch.setattr(
        bench, "train_one", lambda name, lr, seed, *a: _fake_run(name, lr, seed, best_lr=1e-3)
    )
    ctx = Context(suite="sinkgd", case="control", mode="full", out_dir=tmp_path)
    bench.control(ctx)
    rows = {r.params["lr"]: r for r in ctx.results}
    # 1e-3 is the grid's lower edge: extended to 5e-4, which brackets it
    assert set(rows) == {5e-4, 1e-3, 2e-3} and rows[1e-3].params["best"]
    assert sorted(r.params["seeds"] for r in rows.values()) == [1, 1, 3]
