"""The benchmark's pieces: bootstrap CIs, the evaluation attacker, student checkpoints, the smoke
plan's runs (the full smoke suite runs in tests/test_smoke.py on an empty cache)."""

from __future__ import annotations

import math

import pytest
import torch
from seal import bench
from seal.student import SEAL, AnonymizeOnlySFT, SFTOnly

TINY = dict(layers=1, width=32, heads=2, sft_steps=3, dpo_steps=2, batch_size=4, max_new_tokens=8)


@pytest.fixture(scope="module")
def smoke_data():
    return bench._data(bench.PLANS["smoke"], 0)


def test_bootstrap_ci_is_paired_and_resamples_seeds_then_profiles():
    g = torch.Generator().manual_seed(0)
    groups = [
        {
            "a": (0.5 + 0.1 * torch.randn(30, generator=g, dtype=torch.float64)).tolist(),
            "b": (0.3 + 0.1 * torch.randn(30, generator=g, dtype=torch.float64)).tolist(),
        }
        for _ in range(3)
    ]
    value, low, high = bench.bootstrap_ci(groups, lambda m: m["a"] - m["b"], resamples=300)
    pooled_a = sum(sum(x["a"]) for x in groups) / 90
    pooled_b = sum(sum(x["b"]) for x in groups) / 90
    assert math.isclose(value, pooled_a - pooled_b, rel_tol=1e-12) and low < value < high
    # a paired difference of identical arrays is exactly zero in every resample
    same = [{"a": x["a"], "b": x["a"]} for x in groups]
    assert bench.bootstrap_ci(same, lambda m: m["a"] - m["b"], resamples=50) == (0.0, 0.0, 0.0)
    # one seed of constant values: no spread
    assert bench.bootstrap_ci([{"a": [0.25] * 7}], lambda m: m["a"], resamples=20) == (
        0.25,
        0.25,
        0.25,
    )
    with pytest.raises(ValueError, match="groups"):
        bench.bootstrap_ci([], lambda m: 0.0)
    with pytest.raises(ValueError, match="groups"):
        bench.bootstrap_ci([{"a": [1.0]}, {"b": [1.0]}], lambda m: 0.0)
    with pytest.raises(ValueError, match="resamples"):
        bench.bootstrap_ci([{"a": [1.0]}], lambda m: 0.0, resamples=0)


def test_evaluation_attacker_takes_the_more_confident_guess(smoke_data):
    attacker = bench.EvaluationAttacker(smoke_data.attack, seed=0)
    texts = [p.text for p in smoke_data.test] + [""]
    lex, bow = (
        attacker.lexicon.infer([t or "." for t in texts]),
        attacker.bow.infer([t or "." for t in texts]),
    )
    for pred, a, b in zip(attacker.predict(texts), lex, bow, strict=True):
        for attr in b:
            best = a[attr] if attr in a and a[attr].confidence >= b[attr].confidence else b[attr]
            assert pred[attr] == best.value


def test_student_state_round_trip_and_refusals(smoke_data):
    trajs = smoke_data.trajectories
    texts = [p.text for p in smoke_data.test[:2]]
    student = SFTOnly(**TINY).fit(trajs)
    state = student.state_dict()
    back = SFTOnly(**TINY).load_state_dict(state)
    assert back.tokenizer == student.tokenizer
    for k, v in student.model.state_dict().items():
        assert torch.equal(v, back.model.state_dict()[k]), k
    assert [s[-1].text for s in back.refine(texts)] == [s[-1].text for s in student.refine(texts)]
    with pytest.raises(ValueError, match="a SFTOnly state, expected AnonymizeOnlySFT"):
        AnonymizeOnlySFT(**TINY).load_state_dict(state)
    with pytest.raises(ValueError, match="width=32"):
        SFTOnly(**{**TINY, "width": 16}).load_state_dict(state)
    with pytest.raises(ValueError, match="not a student state_dict"):
        SFTOnly(**TINY).load_state_dict({"model": {}})
    broken = {**state, "vocab": state["vocab"] + ["zzz-extra"]}
    with pytest.raises(ValueError, match="do not fit the model"):
        SFTOnly(**TINY).load_state_dict(broken)


def test_seal_from_a_cached_sft_state_equals_training_it(smoke_data):
    """SEAL's SFT stage is SFTOnly: continuing from SFTOnly's state gives the same student."""
    trajs = smoke_data.trajectories
    whole = SEAL(**TINY).fit(trajs)
    sft_state = SFTOnly(**TINY).fit(trajs).state_dict()
    resumed = SEAL(**TINY).fit(trajs, sft_state=sft_state)
    assert whole.history["dpo"].losses == resumed.history["dpo"].losses
    for k, v in whole.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    with pytest.raises(ValueError, match="sft_steps"):
        SEAL(**{**TINY, "sft_steps": 4}).fit(trajs, sft_state=sft_state)
    with pytest.raises(ValueError, match="only SEAL"):
        SFTOnly(**TINY).fit(trajs, sft_state=sft_state)
    other = bench._data(bench.dataclasses.replace(bench.PLANS["smoke"], profiles=21), 0)
    with pytest.raises(ValueError, match="vocabulary"):
        SEAL(**TINY).fit(other.trajectories, sft_state=sft_state)


def test_fixed_arms_and_the_unseen_test_split(smoke_data):
    plan = bench.PLANS["smoke"]
    texts = bench._fixed(plan, 0)
    assert set(texts) == {"identity", "scrubber", "teacher"}
    originals = [p.text for p in smoke_data.test]
    assert [r[0] for r in texts["identity"]] == [r[0] for r in texts["teacher"]] == originals
    assert all(len(set(r)) == 1 for r in texts["identity"] + texts["scrubber"])
    for rows in texts.values():
        assert all(len(r) == plan.iterations + 1 for r in rows)
    assert any(r[-1] != r[0] for r in texts["teacher"])  # the teacher edits
    pair = lambda p: tuple(p.attributes[a] for a in bench.UNSEEN)  # noqa: E731
    assert not {pair(p) for p in smoke_data.test} & {pair(p) for p in smoke_data.train}


def test_run_one_student_through_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURIPS25_CACHE", str(tmp_path))
    plan = bench.PLANS["smoke"]
    first = bench._run((plan, "sft_only", 0))
    again = bench._run((plan, "sft_only", 0))
    assert first["cached"] is False and again["cached"] is True
    assert first["texts"] == again["texts"]
    assert len(first["texts"]) == plan.sizes[2]
    assert all(len(r) == plan.iterations + 1 for r in first["texts"])
    assert first["sft_loss"] == again["sft_loss"] and len(first["sft_loss"]) == 2
    c = first["critiques"]  # one <priv> critique per text at the start, more per rewrite
    assert (
        c["priv"] == plan.sizes[2] + sum(first["rewrites"])
        and 0 <= c["priv_unreadable"] <= c["priv"]
    )
    with pytest.raises(ValueError, match="arm"):
        bench._student(plan, "presidio", 0)


def test_workers_default_to_two_for_full_only(monkeypatch):
    monkeypatch.delenv("SEAL_WORKERS", raising=False)
    assert bench._workers("quick") == 1
    assert bench._workers("full") == min(2, __import__("os").cpu_count() or 1)
    monkeypatch.setenv("SEAL_WORKERS", "0")
    with pytest.raises(ValueError, match="SEAL_WORKERS"):
        bench._workers("full")
