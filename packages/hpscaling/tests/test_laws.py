"""The laws and the recommender: identities, the paper's worked values, bounds, bad input."""

import math

import pytest
from hpscaling import (
    PAPER,
    Constant,
    b_crit,
    b_opt,
    constant_tau_lambda,
    kaplan_batch,
    lambda_opt,
    recommend,
    scale_lr,
    tau_opt,
    timescale,
)
from hpscaling.laws import FIT_RANGE


@pytest.mark.parametrize("N", [1.1e8, 6.1e8, 3.3e9])
@pytest.mark.parametrize("tpp", [5.0, 20.0, 234.0, 1280.0])
@pytest.mark.parametrize("B", [2048.0, 2**19, 3e6])
def test_timescale_of_lambda_opt_is_tau_opt(N, tpp, B):
    D = tpp * N
    lam = lambda_opt(N, D, B, eta=1.6e-2)
    assert abs(timescale(B, 1.6e-2, lam, D) - tau_opt(D / N)) <= 1e-12 * tau_opt(D / N)


def test_doubling_B_doubles_lambda_opt_and_scaling_B_and_lambda_keeps_tau():
    N, D, eta = 3e8, 6e9, 1e-2
    lam = lambda_opt(N, D, 2**18, eta)
    assert lambda_opt(N, D, 2**19, eta) == pytest.approx(2 * lam, rel=1e-14)
    for k in (0.25, 3.0, 10.0):
        assert timescale(k * 2**18, eta, k * lam, D) == pytest.approx(
            timescale(2**18, eta, lam, D), rel=1e-14
        )


@pytest.mark.parametrize(("tpp", "worked"), [(20, 0.224), (80, 0.108), (234, 0.061), (1280, 0.025)])
def test_tau_opt_worked_values(tpp, worked):
    assert tau_opt(tpp) == pytest.approx(worked, rel=5e-3)


@pytest.mark.parametrize(
    ("D", "worked"), [(1e9, 0.175e6), (4e10, 0.721e6), (1e11, 1.02e6), (1e12, 2.47e6)]
)
def test_b_opt_worked_values(D, worked):
    assert b_opt(D) == pytest.approx(worked, rel=5e-3)


def test_b_opt_4e10_within_half_a_percent_and_units_agree():
    assert abs(b_opt(4e10) / 0.721e6 - 1) < 5e-3
    assert b_opt(4e10, unit="sequences") * 2048 == pytest.approx(b_opt(4e10), rel=1e-14)
    assert b_opt(4e10, unit="sequences", seq_len=512) * 512 == pytest.approx(b_opt(4e10), rel=1e-14)
    assert b_opt(4e10, unit="sequences") == pytest.approx(0.0306 * 4e10**0.383, rel=1e-14)


def test_b_crit_needs_a_coefficient_or_the_flag():
    with pytest.raises(ValueError, match="c_crit"):
        b_crit(1e10)
    assert b_crit(1e10, c_crit=2.0) == pytest.approx(2.0 * 1e10**PAPER.m_crit.value)
    unverified = PAPER.__class__(**{**PAPER.__dict__, "c_crit": Constant(3.0, "test", False)})
    with pytest.raises(ValueError, match="allow_unverified"):
        b_crit(1e10, consts=unverified)
    assert b_crit(1e10, consts=unverified, allow_unverified=True) == pytest.approx(
        3.0 * 1e10**PAPER.m_crit.value
    )


def test_paper_constants_carry_provenance_and_flags():
    for name in ("c_tau", "m_tau", "c_opt_seq", "m_opt", "c_crit", "m_crit"):
        constant = getattr(PAPER, name)
        assert constant.provenance
        assert isinstance(constant.verified, bool)
    assert PAPER.c_crit.value is None and not PAPER.c_crit.verified
    with pytest.raises(AttributeError):
        PAPER.c_tau = Constant(1.0, "x", True)  # frozen


def test_recommend_fields_and_consistency():
    r = recommend(N=3.3e9, D=20 * 3.3e9, eta=1e-2)
    assert r.B_opt == pytest.approx(b_opt(r.D))
    assert r.B_used % 2048 == 0
    assert r.lambda_opt == pytest.approx(lambda_opt(r.N, r.D, r.B_used, r.eta), rel=1e-12)
    assert r.steps == pytest.approx(r.D / r.B_used)
    assert r.B_crit is None and r.warnings == ()
    p2 = recommend(N=3.3e9, D=20 * 3.3e9, eta=1e-2, round_to_pow2=True)
    sequences = p2.B_used / 2048
    assert sequences == 2 ** round(math.log2(sequences))


def test_recommend_warnings_fire_exactly_at_the_bounds():
    lo, hi = FIT_RANGE["tpp"]
    N = 1e9
    assert recommend(N, lo * N, 1e-2).warnings == ()
    assert recommend(N, hi * N, 1e-2).warnings == ()
    below = recommend(N, lo * N * (1 - 1e-9), 1e-2).warnings
    above = recommend(N, hi * N * (1 + 1e-9), 1e-2).warnings
    assert len(below) == 1 and "TPP" in below[0]
    assert len(above) == 1 and "TPP" in above[0]
    n_lo, n_hi = FIT_RANGE["N"]
    assert recommend(n_lo, 20 * n_lo, 1e-2).warnings == ()
    assert recommend(n_hi, 20 * n_hi, 1e-2).warnings == ()
    assert any("N=" in w for w in recommend(n_hi * 1.01, 20 * n_hi * 1.01, 1e-2).warnings)
    # B above B_crit: Law 1 breaks
    r = recommend(1e9, 2e10, 1e-2, B=4e6, c_crit=1.0)
    assert r.B_crit == pytest.approx(b_crit(2e10, c_crit=1.0))
    assert (r.B_used > r.B_crit) == any("B_crit" in w for w in r.warnings)
    r_ok = recommend(1e9, 2e10, 1e-2, B=1.0, c_crit=1.0)
    assert not any("B_crit" in w for w in r_ok.warnings)


def test_baselines():
    assert constant_tau_lambda(0.2, 1024, 1e-3, 1e6) == pytest.approx(5.12)
    assert scale_lr(1e-3, 16, 64, "sqrt") == pytest.approx(2e-3)
    assert scale_lr(1e-3, 16, 64, "linear") == pytest.approx(4e-3)
    assert kaplan_batch(2e20, 1e20, 1e6) == pytest.approx(1e6 * 2**0.24)


def test_lambda_zero_gives_infinite_timescale_with_a_warning_or_an_error():
    with pytest.warns(RuntimeWarning, match="infinite"):
        assert timescale(1024, 1e-3, 0.0, 1e6) == math.inf
    with pytest.raises(ValueError, match="lam"):
        timescale(1024, 1e-3, 0.0, 1e6, strict=True)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: timescale(0, 1e-3, 0.1, 1e6), "B_tokens"),
        (lambda: timescale(1024, -1e-3, 0.1, 1e6), "eta"),
        (lambda: timescale(1024, 1e-3, -0.1, 1e6), "lam"),
        (lambda: timescale(1024, 1e-3, 0.1, 0), "D_tokens"),
        (lambda: tau_opt(0), "tpp"),
        (lambda: lambda_opt(0, 1e9, 1024, 1e-3), "N"),
        (lambda: lambda_opt(1e8, -1, 1024, 1e-3), "D"),
        (lambda: lambda_opt(1e8, 1e9, 0, 1e-3), "B"),
        (lambda: lambda_opt(1e8, 1e9, 1024, 0), "eta"),
        (lambda: lambda_opt(1e8, 1e9, 1024, math.nan), "eta"),
        (lambda: b_opt(1e9, unit="bytes"), "unit"),
        (lambda: b_opt(1e9, unit="sequences", seq_len=0), "seq_len"),
        (lambda: b_opt(0), "D"),
        (lambda: recommend(-1, 1e9, 1e-3), "N"),
        (lambda: recommend(1e8, 1e9, 0), "eta"),
        (lambda: recommend(1e8, 1e9, 1e-3, B=0), "B"),
        (lambda: scale_lr(1e-3, 16, 32, "cubic"), "rule"),
        (lambda: b_crit(1e9, c_crit=-1.0), "c_crit"),
    ],
)
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: timescale("1024", 1e-3, 0.1, 1e6), "B_tokens"),
        (lambda: tau_opt(True), "tpp"),
        (lambda: tau_opt(20, consts={"c_tau": 1}), "consts"),
    ],
)
def test_wrong_types_name_the_argument(call, name):
    with pytest.raises(TypeError, match=name):
        call()
