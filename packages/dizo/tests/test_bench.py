"""The suite is declared with every case in every mode; the task data is real and balanced."""

from __future__ import annotations

import pytest
import torch
from dizo.bench import SUITE
from dizo.tasks import snippet_task


def test_suite_cases():
    names = {c.name for c in SUITE.cases}
    assert SUITE.name == "dizo"
    assert names == {"task_a_lm_adaptation", "task_b_classification", "step_time", "peak_memory"}
    for mode in ("smoke", "full"):
        assert {c.name for c in SUITE.cases_for(mode)} == names
    # quick is the two tasks only (the speed cases are smoke + full; see the README)
    assert {c.name for c in SUITE.cases_for("quick")} == {
        "task_a_lm_adaptation",
        "task_b_classification",
    }


def test_held_out_corpus_is_the_held_out_families_split_by_file():
    from dizo.models import HELD_OUT, held_out_corpus, pretraining_corpus

    held, pre = held_out_corpus(), pretraining_corpus()
    files = held.train_files + held.val_files
    assert files and all(f.startswith(HELD_OUT) for f in files)
    assert {f.split("/")[0] for f in held.val_files} <= {"email", "json"}
    assert not set(held.train_files) & set(held.val_files)
    assert not set(files) & set(pre.train_files + pre.val_files)  # never seen in pretraining
    assert held.train.numel() > 100_000 and held.val.numel() > 10_000
    with pytest.raises(ValueError, match="val_every"):
        held_out_corpus(1)


def _tiny_opt():
    from dizo.models import OPT_SMOKE, opt_config
    from transformers import OPTForCausalLM

    torch.manual_seed(0)
    return OPTForCausalLM(opt_config(**OPT_SMOKE)).eval()


def test_task_a_metric_is_bits_per_byte_of_the_loss():
    import math

    from dizo.models import held_out_corpus
    from dizo.tasks import evaluate_lm, lm_loss

    model, corpus = _tiny_opt(), held_out_corpus()
    bpb = evaluate_lm(model, corpus, seq_len=16, num_batches=3, batch_size=4)
    with torch.no_grad():
        nats = [
            float(lm_loss(model, b)) for b in corpus.batches("val", 4, 16, seed=0, num_batches=3)
        ]
    assert bpb == pytest.approx(sum(nats) / 3 / math.log(2), rel=1e-6)
    assert 7.0 < bpb < 9.0  # an untrained byte LM is near log2(256) = 8 bits/byte


@pytest.mark.parametrize("arm", ["mezo", "dizo", "fo_adamw"])
def test_task_a_arm_trains_and_counts_forward_passes(arm):
    from dizo.bench import _run_arm, _Task
    from dizo.models import held_out_corpus
    from dizo.tasks import evaluate_lm, lm_loss

    corpus, base = held_out_corpus(), _tiny_opt()
    before = {k: v.clone() for k, v in base.state_dict().items()}
    task = _Task(
        name="task_a",
        loss_fn=lm_loss,
        batches=lambda seed: corpus.batches("train", 4, 16, seed=seed),
        evaluate=lambda m: {"eval_bpb": evaluate_lm(m, corpus, 16, 2, batch_size=4)},
        metric="eval_bpb",
        unit="bits/byte",
    )
    start = task.evaluate(base)
    run = _run_arm(arm, base, 1e-3, task, steps=4, seed=0, eval_every=2, start=start)
    assert [c["step"] for c in run["curve"]] == [0, 2, 4]
    per_step = 3 if arm == "fo_adamw" else 2  # no DiZO round within 4 steps (interval 50)
    assert [c["forward_passes"] for c in run["curve"]] == [0, 2 * per_step, 4 * per_step]
    assert run["curve"][-1]["eval_bpb"] != start["eval_bpb"]  # the weights moved
    assert run["div"] and all(v[0] > 0 for v in run["div"].values())
    for k, v in base.state_dict().items():  # the shared base is never modified
        assert torch.equal(v, before[k]), k


def test_snippet_task_shapes_and_balance():
    (x, y), (xe, ye) = snippet_task(32, 20, seed=0)
    assert x.shape == (32, 66) and xe.shape == (20, 66)
    assert int(y.sum()) == 16 and int(ye.sum()) == 10
    assert torch.all(x[:, -1] == ord("#")) and x.max() < 256


@pytest.mark.slow
def test_gpu_script_toy(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    pytest.importorskip("triton")
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"
    out = tmp_path / "gpu.json"
    env = {**os.environ, "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1")}
    proc = subprocess.run(
        [sys.executable, str(script), "--toy", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["correctness"]["ok"]
    assert {r["arm"] for r in res["models"]} == {"fo_adamw", "mezo_torch", "mezo_triton", "dizo"}


def test_lora_init_depends_on_the_seed_only_and_leaves_the_global_rng_alone():
    pytest.importorskip("peft", reason="peft is the `peers` extra")
    from dizo.bench import _lora

    def lora_a(seed, global_seed):
        model = _tiny_opt()
        torch.manual_seed(global_seed)
        before = torch.random.get_rng_state()
        model = _lora(model, seed)
        assert torch.equal(before, torch.random.get_rng_state())  # the user's RNG is untouched
        return torch.cat([p.flatten() for n, p in model.named_parameters() if "lora_A" in n])

    assert torch.equal(lora_a(0, 1), lora_a(0, 2))
    assert not torch.equal(lora_a(0, 1), lora_a(1, 1))
