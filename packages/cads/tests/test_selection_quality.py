"""Is the selection any good? Label noise on a slice of scikit-learn's digits.

400 training images, 60 of them (15 %) with a wrong label; 150 clean validation images; an MLP
64-32-10, SGD momentum 0.9, batch 32, B = 100 steps. A good selection holds fewer noisy images
than a random subset of the same size at the same budget: we ask the hypergeometric law (the
exact law of a random subset) for P(random holds <= as many noisy images) < 1 %, and the noisy
images' mean selection probability to sit >= 0.1 below the clean ones'. One fixed seed (0), run
once with these settings; never tuned. Both solvers take 8-12 s of CPU, so both are slow-marked.
"""

import pytest
import torch
from cads import BernoulliPolicy, Budget, BudgetedPBCS, CADSConfig, TrainingValue
from cads.solver import CADS
from scipy.stats import hypergeom
from torch import nn

N, NOISY, B = 400, 60, Budget(100, 32)


def _noisy_digits():
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(y), generator=g)
    train, val = perm[:N], perm[N : N + 150]
    x_train, y_train = x[train], y[train].clone()
    noisy = torch.zeros(N, dtype=torch.bool)
    noisy[torch.randperm(N, generator=g)[:NOISY]] = True
    y_train[noisy] = (y_train[noisy] + torch.randint(1, 10, (NOISY,), generator=g)) % 10
    return (x_train, y_train), (x[val], y[val]), noisy


def _factory():
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.15 * torch.randn(p.shape, generator=g))
    return model


def _check_drops_noise(s, noisy):
    mask = s >= 0.5
    size, held = int(mask.sum()), int((mask & noisy).sum())
    p_random = hypergeom(N, NOISY, size).cdf(held)
    gap = s[~noisy].mean().item() - s[noisy].mean().item()
    msg = f"{held}/{size} noisy selected (random: {NOISY * size / N:.1f}), P = {p_random:.3g}, gap {gap:.3f}"
    assert p_random < 0.01, msg
    assert gap >= 0.1, msg


@pytest.mark.slow
def test_budgeted_pbcs_drops_label_noise():
    # Measured (seed 0): 19/207 noisy kept vs 31.1 expected at random (P = 0.0006); s 0.39 vs 0.53.
    train, val, noisy = _noisy_digits()
    value_fn = TrainingValue(_factory, nn.functional.cross_entropy, train, val, B)
    policy = BernoulliPolicy(N)
    BudgetedPBCS(value_fn, policy, outer_steps=40, rollouts=4).fit(torch.Generator().manual_seed(0))
    _check_drops_noise(policy.s, noisy)


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="does not hold at this size: CADS-E (penalty values, tau = 0.2, 150 outer steps) keeps "
    "25/194 noisy images vs 29.1 expected at random (P = 0.16); s 0.43 noisy vs 0.50 clean. "
    "At 60 outer steps noisy images were even slightly favoured (s 0.50 vs 0.48). See README.",
)
def test_cads_drops_label_noise():
    train, val, noisy = _noisy_digits()
    cfg = CADSConfig(B, outer_steps=150)
    sel = CADS(_factory, nn.functional.cross_entropy, train, val, cfg).fit(
        torch.Generator().manual_seed(0)
    )
    _check_drops_noise(sel.param, noisy)
