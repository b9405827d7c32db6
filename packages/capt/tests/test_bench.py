"""The benchmark's pieces: tasks (file-level splits), verbalizer, arms' sizes, training, Finding II."""

from __future__ import annotations

import pytest
import torch
from capt import InstanceToken, PromptTuning, get_peft_model, quality
from capt.tasks import SEP, SNIPPET, TASKS, _groups, _split, make_task, verbalize


@pytest.mark.parametrize("name", ["T1", "T2"])
def test_tasks_are_balanced_deterministic_and_split_by_file(name):
    ids, labels, task = make_task(name, 12, "train", seed=0)
    again, _, _ = make_task(name, 12, "train", seed=0)
    assert torch.equal(ids, again) and ids.shape == (12, SNIPPET + 1)
    assert bool((ids[:, -1] == SEP).all()) and bool((ids[:, :-1] != SEP).all())
    assert labels.bincount().tolist() == [12 // len(task.classes)] * len(task.classes)
    for files in _groups(name):
        train, test = _split(files)
        assert train and test and not set(train) & set(test)


@pytest.mark.slow  # tokenizes 120 files (~4 s CPU)
def test_t3_labels_follow_tokenize():
    ids, labels, task = make_task("T3", 30, "test", seed=5)
    assert task.classes == ("code", "comment", "docstring")
    for row, label in zip(ids, labels, strict=True):
        line = bytes(row[:-1].tolist()).rsplit(b"\n", 1)[-1].strip()
        if label == 1:
            assert line.startswith(b"#")
        elif label == 0:
            assert line and not line.startswith(b"#")


def test_verbalize_takes_the_last_position():
    logits = torch.randn(2, 5, 256)
    ids = TASKS["T1"].label_ids
    assert torch.equal(verbalize(logits, ids), logits[:, -1, ids])
    with pytest.raises(ValueError, match="label_token_ids"):
        verbalize(logits, torch.tensor([300]))
    with pytest.raises(ValueError, match="logits"):
        verbalize(torch.zeros(3), ids)


def test_task_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="name"):
        make_task("T9", 4, "train")
    with pytest.raises(ValueError, match="n:"):
        make_task("T1", 0, "train")
    with pytest.raises(ValueError, match="split"):
        make_task("T1", 4, "val")


def _byte_llama(hidden=16, layers=2):
    from neurips25_core.models import tiny_llama, tiny_llama_config

    model = tiny_llama(tiny_llama_config(hidden_size=hidden, num_layers=layers, num_heads=2))
    model.set_attn_implementation("eager")
    return model.eval()


def test_arm_parameter_counts_match_the_issue():
    """At width d with L layers: CaPT L·d, deep PT(1) L·d, PT(1) d, peft PT(20) 20·d, prefix(1) 2·L·d,
    LoRA r=4 on q, v: L·2·(4d + 4d) (the issue's 512, 512, 128, 2,560, 1,024, 8,192 at d=128, L=4)."""
    d, L = 16, 2
    base = _byte_llama(d, L)
    want = {"capt": L * d, "capt_concat": L * d, "deep_pt1": L * d, "pt1": d}
    if quality.peft_available():
        want.update(peft_pt20=20 * d, peft_prefix1=2 * L * d, peft_lora4=L * 2 * 8 * d)
    for arm, count in want.items():
        model = quality.build_arm(arm, base, seed=0)
        got = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert got == count, arm
    assert not base.model.layers[0]._forward_pre_hooks  # every arm wraps its own copy
    with pytest.raises(ValueError, match="name"):
        quality.build_arm("capt_xl", base)


def test_fit_trains_and_accuracy_is_the_argmax_over_the_verbalizer():
    base = _byte_llama()
    ids, labels, task = make_task("T1", 24, "train")
    model = quality.build_arm("capt", base, seed=0)
    before = model.capsules.detach().clone()
    with torch.no_grad():  # fit trains under an outer no_grad too
        info = quality.fit(model, ids, labels, task, steps=3, lr=1e-2, batch_size=8)
    assert not torch.equal(before, model.capsules) and info["trainable"] == 2 * 16
    with torch.no_grad():
        pred = model(input_ids=ids).logits[:, -1, task.label_ids].argmax(-1)
    assert quality.accuracy(model, ids, labels, task, batch_size=7) == float(
        (pred == labels).float().mean()
    )
    for kwargs, name in (({"steps": 0}, "steps"), ({"lr": -1.0}, "lr")):
        args = {"steps": 2, "lr": 1e-2, **kwargs}
        with pytest.raises(ValueError, match=name):
            quality.fit(model, ids, labels, task, **args)
    with pytest.raises(ValueError, match="labels"):
        quality.fit(model, ids, labels[:3], task, steps=1, lr=1e-2)


def test_finding_two_on_peft_prompts_equals_our_prompt_tuning_with_the_token():
    peft = pytest.importorskip("peft", reason="peft (the 'peers' extra) is not installed")
    base = _byte_llama()
    ids, labels, task = make_task("T1", 16, "test")
    trained = quality.build_arm("peft_pt20", base, seed=1)
    assert isinstance(trained, peft.PeftModel)
    got = quality.finding_two(trained, base, ids, labels, task)
    ours = get_peft_model(quality._fresh(base), PromptTuning(20))
    with torch.no_grad():
        ours.capsules[0].copy_(trained.prompt_encoder["default"].embedding.weight)
    assert got == quality.accuracy(InstanceToken().apply(ours), ids, labels, task)


def test_mean_ci_is_student_t():
    mean, half = quality.mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0 and abs(half - 4.302652729911275 / 3**0.5) < 1e-9
    assert quality.mean_ci([0.5]) == (0.5, 0.0)


@pytest.mark.slow  # spawns two worker processes (~6 s wall)
def test_quality_runs_in_two_workers_equal_one_process(tmp_path, monkeypatch):
    """``CAPT_WORKERS``: every run is seeded and single-threaded, so two processes give the same
    results bit for bit (the step times aside)."""
    from capt import bench

    from neurips25_core.parallel import process_map

    monkeypatch.setenv("NEURIPS25_CACHE", str(tmp_path))
    plan = bench.PLANS["smoke"]
    jobs = [("smoke", plan, arm, "T1", 1e-2, seed) for arm in ("capt", "pt1") for seed in (0, 1)]
    one = process_map(bench._run, jobs, workers=1, progress=False)
    two = process_map(bench._run, jobs, workers=2, progress=False)

    def strip(r):
        return {k: v for k, v in r.items() if "seconds" not in k}

    assert [strip(r) for r in one] == [strip(r) for r in two]
    assert [(r["arm"], r["seed"]) for r in two] == [(j[2], j[5]) for j in jobs]


def test_workers_default_to_two_for_full_only(monkeypatch):
    from capt import bench

    monkeypatch.delenv("CAPT_WORKERS", raising=False)
    assert bench._workers("quick") == 1
    assert bench._workers("full") == min(2, __import__("os").cpu_count() or 1)
    monkeypatch.setenv("CAPT_WORKERS", "0")
    with pytest.raises(ValueError, match="CAPT_WORKERS"):
        bench._workers("full")
