"""Task generators: labels on hand examples, batches consistent with the labels, group orders."""

from __future__ import annotations

import pytest
import torch
from pdssm.tasks import GROUP_GENERATORS, TASKS, get_task, group_elements


@pytest.mark.parametrize(
    ("name", "tokens", "label"),
    [
        ("parity", [2, 2, 1], 1),  # two b: even
        ("parity", [1, 2, 1, 1], 2),
        ("even_pairs", [1, 2, 2, 1], 1),
        ("even_pairs", [2, 1, 1], 2),
        ("cycle_nav", [2, 2, 3, 1], 5),  # +1 +1 −1 STAY → position 1 → label 4 + 1
        ("cycle_nav", [3], 8),  # −1 → position 4
        ("cycle_nav", [2] * 5, 4),  # a full turn
        ("mod_arith_no_brack", [7, 1, 8, 3, 9, 4], 9),  # 2 + 3×4 = 14 ≡ 4 → 9
        ("mod_arith_no_brack", [8, 2, 9, 4], 9),  # 3 − 4 = −1 ≡ 4 → 9
        ("mod_arith_no_brack", [6, 3, 7, 2, 8, 3, 9, 4], 5),  # 1×2 − 3×4 = −10 ≡ 0 → 5
    ],
)
def test_hand_labels(name, tokens, label):
    assert get_task(name).label(tokens) == label


def test_group_labels_by_hand():
    s3 = get_task("S3")
    # (01) twice is the identity; (012) three times is the identity.
    assert s3.label([0, 0]) == [s3.label([0])[0], 0]
    assert s3.label([1, 1, 1])[-1] == 0
    assert s3.label([2, 2]) == [0, 0]  # the identity input keeps the state


@pytest.mark.parametrize(("name", "order"), [("S3", 6), ("A4", 12), ("A5", 60), ("S5", 120)])
def test_group_orders(name, order):
    assert len(group_elements(GROUP_GENERATORS[name])) == order
    task = get_task(name)
    assert task.num_classes == order
    _, y, mask = task.sample(64, 300)
    assert int(y.max()) < order and bool(mask.all())


def test_group_extra_generators():
    task = get_task("A5", num_inputs=6, seed=1)
    assert task.vocab_size == 6 and task.num_classes == 60


@pytest.mark.parametrize("name", TASKS)
def test_batches_match_labels(name):
    task = get_task(name)
    g = torch.Generator().manual_seed(0)
    x, y, mask = task.sample(16, 3, 12, generator=g)
    assert x.dtype == y.dtype == torch.long and mask.dtype == torch.bool
    assert int(x.max()) < task.vocab_size and int(y.max()) < task.num_classes
    for row in range(16):
        length = int(mask[row].nonzero().max()) + 1
        tokens = x[row, :length].tolist()
        if task.per_token:
            assert y[row, :length].tolist() == task.label(tokens)
        else:
            assert mask[row].sum() == 1 and y[row, length - 1].item() == task.label(tokens)
            assert bool((x[row, length:] == 0).all())


def test_sampling_is_seeded():
    task = get_task("cycle_nav")
    a = task.sample(8, 3, 40, generator=torch.Generator().manual_seed(5))
    b = task.sample(8, 3, 40, generator=torch.Generator().manual_seed(5))
    assert all(torch.equal(u, v) for u, v in zip(a, b))


def test_mod_arith_lengths_rounded_up_to_even():
    x, _, mask = get_task("mod_arith_no_brack").sample(32, 3, 3)
    assert bool((mask.sum(1) == 1).all()) and x.shape[1] == 4
