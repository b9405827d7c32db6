"""The suite is declared with every case in every mode; the task data is real and balanced."""

from __future__ import annotations

import torch
from dizo.bench import SUITE
from dizo.tasks import snippet_task


def test_suite_cases():
    names = {c.name for c in SUITE.cases}
    assert SUITE.name == "dizo"
    assert {"task_b_classification", "step_time"} <= names
    for mode in ("smoke", "quick", "full"):
        assert {c.name for c in SUITE.cases_for(mode)} == names


def test_snippet_task_shapes_and_balance():
    (x, y), (xe, ye) = snippet_task(32, 20, seed=0)
    assert x.shape == (32, 66) and xe.shape == (20, 66)
    assert int(y.sum()) == 16 and int(ye.sum()) == 10
    assert torch.all(x[:, -1] == ord("#")) and x.max() < 256
