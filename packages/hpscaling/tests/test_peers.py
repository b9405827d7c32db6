"""The optuna peer: a TPE search over log λ, or a clear error when optuna is absent."""

import importlib.util
import math

import pytest
from hpscaling import peers


@pytest.mark.skipif(
    importlib.util.find_spec("optuna") is None, reason="optuna (peers extra) absent"
)
def test_optuna_search_is_log_uniform_in_range_and_seeded():
    def objective(lam):
        return (math.log(lam) - math.log(0.3)) ** 2

    trials = peers.optuna_lambda_search(objective, 6, 1e-3, 10.0, seed=0)
    assert len(trials) == 6
    assert all(1e-3 <= lam <= 10.0 for lam, _ in trials)
    assert all(loss == objective(lam) for lam, loss in trials)
    assert trials == peers.optuna_lambda_search(objective, 6, 1e-3, 10.0, seed=0)


def test_missing_optuna_is_a_clear_import_error(monkeypatch):
    monkeypatch.setattr(peers, "optuna_available", lambda: False)
    with pytest.raises(ImportError, match=r"hpscaling\[peers\]"):
        peers.optuna_lambda_search(lambda lam: lam, 2, 0.1, 1.0)


@pytest.mark.parametrize(
    ("args", "name"), [((0, 0.1, 1.0), "n_trials"), ((2, 0.0, 1.0), "low"), ((2, 1.0, 0.5), "high")]
)
def test_bad_input(args, name):
    with pytest.raises(ValueError, match=name):
        peers.optuna_lambda_search(lambda lam: lam, *args)
