"""SFT and DPO under DDP (gloo, two CPU processes) equal one process on the global batch."""

from __future__ import annotations

import copy

import pytest
import torch
from seal.models import WordTokenizer, tiny_lm
from seal.train import dpo, sft

from neurips25_core.distributed import run_distributed

STEPS = 10
EXAMPLES = [
    ("<priv> text: I live in Zurich. <leaks>", "city=Zurich:5"),
    ("<priv> text: I work as a nurse on the night ward. <leaks>", "occupation=nurse:4"),
    ("<util> original: I live in Zurich. text: I live in a city. <utility>", "readability=10"),
    ("<anon> text: I live in Zurich. <rewrite>", "I live in a city."),
    ("<anon> text: I am 34. <rewrite>", "I am an adult, and so on."),
    ("<priv> text: I am 34. <leaks>", "age=25-34:5"),
]
PAIRS = [
    ("<anon> text: I live in Zurich. <rewrite>", "I live in a city.", "I live in Paris."),
    ("<anon> text: I work as a nurse. <rewrite>", "I work in healthcare.", "I work as a nurse."),
    ("<anon> text: I am 34. <rewrite>", "I am an adult.", "I am 35 years old, a nurse."),
    ("<anon> text: I live in Paris. <rewrite>", "I live somewhere.", "I live in Zurich now."),
]


def _train(rank: int, world_size: int, loop: str):
    tok = WordTokenizer.from_corpus([t for row in EXAMPLES + PAIRS for t in row])
    model = tiny_lm(tok, layers=1, width=16, heads=2, max_positions=64, seed=0).double()
    init = torch.cat([p.detach().flatten() for p in model.parameters()])
    if loop == "sft":
        # examples of different lengths: the loss divides by the *global* token count
        sft(model, tok, EXAMPLES, max_steps=STEPS, batch_size=4, lr=1e-2, seed=1)
    else:
        reference = copy.deepcopy(model)
        dpo(model, reference, tok, PAIRS, max_steps=STEPS, batch_size=4, lr=1e-2, seed=1)
    return init, torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("loop", ["sft", "dpo"])
def test_ddp_equals_single_process_on_the_global_batch(loop):
    init, single = _train(0, 1, loop)
    assert (single - init).norm() > 1e-2 * init.norm()  # it did train
    for _, params in run_distributed(_train, world_size=2, args=(loop,)):
        err = ((params - single).norm() / single.norm()).item()
        assert err <= 1e-6, err
