"""The decayed continuation probability and its static heap key (spec section 2)."""

import numpy as np
import pytest
from lpc.decay import continuation_prob, logit, static_key


def test_pi_at_zero_elapsed_is_p_and_decreases_strictly():
    p = np.array([0.01, 0.3, 0.5, 0.9, 0.999])
    np.testing.assert_array_equal(continuation_prob(p, 0.0, 100.0), p)
    t = np.linspace(0.0, 1000.0, 50)
    pi = continuation_prob(0.7, t, 100.0)
    assert (np.diff(pi) < 0).all()


def test_logit_identity_and_fixed_endpoints():
    rng = np.random.default_rng(0)
    p = rng.uniform(0.01, 0.99, 200)
    dt = rng.uniform(0, 300, 200)
    pi = continuation_prob(p, dt, 50.0)
    np.testing.assert_allclose(logit(pi), logit(p) - dt / 50.0, rtol=0, atol=1e-12 * 50)
    np.testing.assert_array_equal(continuation_prob([0.0, 1.0], [5.0, 5.0], 10.0), [0.0, 1.0])


def test_static_key_order_equals_decayed_probability_order():
    rng = np.random.default_rng(1)
    p = rng.uniform(0.05, 0.95, 64)
    t_last = rng.uniform(0, 500, 64)
    now = 600.0
    key = static_key(p, t_last, 100.0)
    pi = continuation_prob(p, now - t_last, 100.0)
    np.testing.assert_array_equal(np.argsort(key, kind="stable"), np.argsort(pi, kind="stable"))


@pytest.mark.parametrize("tau", [0.0, -1.0, float("nan")])
def test_bad_tau_is_refused_by_name(tau):
    with pytest.raises(ValueError, match="tau"):
        continuation_prob(0.5, 1.0, tau)


@pytest.mark.parametrize("p", [-0.1, 1.1, float("nan")])
def test_bad_probability_is_refused_by_name(p):
    with pytest.raises(ValueError, match="p"):
        static_key(p, 0.0, 1.0)
