"""The training runs behind the static rules: EL2N, forgetting, out-of-fold probabilities and the
cleanlab arm, each against the same computation spelled out with ``budgeted_train``."""

import sys

import pytest
import torch
from cads import Budget, budgeted_train
from cads.baselines import (
    cleanlab_selection,
    el2n_by_training,
    el2n_scores,
    forgetting_by_training,
    forgetting_scores,
    out_of_fold_probs,
)
from cads.train import default_optimizer
from torch import nn


def _data(n=37, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g)
    return x, (x[:, 0] + 0.5 * x[:, 1] > 0).long() + (x[:, 2] > 1).long()


def _factory():
    g = torch.Generator().manual_seed(3)
    model = nn.Linear(5, 3)
    with torch.no_grad():
        model.weight.copy_(0.3 * torch.randn(3, 5, generator=g))
        model.bias.zero_()
    return model


def _seeds(seed, count):
    g = torch.Generator().manual_seed(seed)
    return [int(torch.randint(2**62, (1,), generator=g)) for _ in range(count)]


def test_el2n_by_training_is_el2n_of_early_stopped_budgeted_runs():
    data, budget = _data(), Budget(20, 8)
    got = el2n_by_training(
        _factory, data, budget, default_optimizer, torch.Generator().manual_seed(4), runs=3
    )
    probs = []
    for seed in _seeds(4, 3):
        model, _ = budgeted_train(
            _factory,
            data,
            torch.arange(37),
            Budget(2, 8),  # default step: round(B / 10)
            default_optimizer,
            torch.Generator().manual_seed(seed),
        )
        with torch.no_grad():
            probs.append(torch.softmax(model(data[0]).double(), -1))
    assert torch.equal(got, el2n_scores(torch.stack(probs), data[1]))


def test_forgetting_by_training_checks_the_prefixes_of_one_budgeted_run():
    data, budget = _data(), Budget(5, 8)
    got = forgetting_by_training(
        _factory, data, budget, default_optimizer, torch.Generator().manual_seed(9), every=2
    )
    (seed,) = _seeds(9, 1)
    record = []
    for t in (0, 2, 4, 5):
        if t == 0:
            model = _factory()
        else:
            model, _ = budgeted_train(
                _factory,
                data,
                torch.arange(37),
                Budget(t, 8),
                default_optimizer,
                torch.Generator().manual_seed(seed),
            )
        with torch.no_grad():
            record.append(model(data[0]).argmax(-1) == data[1])
    want = forgetting_scores(torch.stack(record))
    assert torch.equal(got, want)


def test_out_of_fold_probs_predicts_each_fold_with_a_model_that_never_saw_it():
    data, budget = _data(), Budget(6, 4)
    got = out_of_fold_probs(
        _factory, data, budget, default_optimizer, torch.Generator().manual_seed(2), folds=3
    )
    assert got.shape == (37, 3) and torch.isfinite(got).all()
    torch.testing.assert_close(got.sum(1), torch.ones(37, dtype=torch.float64))
    g = torch.Generator().manual_seed(2)
    fold_of = torch.empty(37, dtype=torch.long)
    fold_of[torch.randperm(37, generator=g)] = torch.arange(37) % 3
    for f in range(3):
        seed = int(torch.randint(2**62, (1,), generator=g))
        model, _ = budgeted_train(
            _factory,
            data,
            fold_of != f,
            budget,
            default_optimizer,
            torch.Generator().manual_seed(seed),
        )
        held = fold_of == f
        with torch.no_grad():
            assert torch.equal(got[held], torch.softmax(model(data[0][held]).double(), -1))


def test_cleanlab_selection_drops_what_find_label_issues_flags():
    pytest.importorskip("cleanlab", reason="cleanlab is the peers extra")
    from cleanlab.filter import find_label_issues

    data, budget = _data(60), Budget(30, 8)
    keep = cleanlab_selection(
        _factory, data, budget, default_optimizer, torch.Generator().manual_seed(1), folds=3
    )
    probs = out_of_fold_probs(
        _factory, data, budget, default_optimizer, torch.Generator().manual_seed(1), folds=3
    )
    issues = torch.as_tensor(find_label_issues(labels=data[1].numpy(), pred_probs=probs.numpy()))
    assert torch.equal(keep, (~issues).nonzero().squeeze(1))


def test_cleanlab_selection_names_the_missing_peer(monkeypatch):
    monkeypatch.setitem(sys.modules, "cleanlab.filter", None)
    with pytest.raises(ImportError, match="cleanlab"):
        cleanlab_selection(
            _factory, _data(), Budget(2, 4), default_optimizer, torch.Generator().manual_seed(0)
        )


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        (
            lambda d, g: el2n_by_training(_factory, d, Budget(5, 4), default_optimizer, g, runs=0),
            ValueError,
            "runs",
        ),
        (
            lambda d, g: el2n_by_training(_factory, d, Budget(5, 4), default_optimizer, g, step=6),
            ValueError,
            "step",
        ),
        (lambda d, g: el2n_by_training(_factory, d, 5, default_optimizer, g), TypeError, "budget"),
        (
            lambda d, g: el2n_by_training(
                _factory, (d[0], d[1].double()), Budget(5, 4), default_optimizer, g
            ),
            TypeError,
            "targets",
        ),
        (
            lambda d, g: forgetting_by_training(
                _factory, d, Budget(5, 4), default_optimizer, g, every=0
            ),
            ValueError,
            "every",
        ),
        (
            lambda d, g: forgetting_by_training(_factory, d, Budget(5, 4), default_optimizer, None),
            TypeError,
            "generator",
        ),
        (
            lambda d, g: out_of_fold_probs(
                _factory, d, Budget(5, 4), default_optimizer, g, folds=1
            ),
            ValueError,
            "folds",
        ),
        (
            lambda d, g: out_of_fold_probs(
                _factory, d, Budget(5, 4), default_optimizer, g, folds=38
            ),
            ValueError,
            "folds",
        ),
    ],
)
def test_bad_input_names_the_argument(call, error, name):
    with pytest.raises(error, match=name):
        call(_data(), torch.Generator().manual_seed(0))
