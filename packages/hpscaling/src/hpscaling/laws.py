"""The Power Lines laws: the AdamW timescale, τ_opt(TPP), λ_opt, B_opt, B_crit and the recommender.

Everything here is float64 pure Python (``math``): the formulas are the spec in code. Units are
tokens for both the batch B and the dataset D unless a function says otherwise; τ = B/(ηλD) is
unitless only when B and D share a unit.

Example (CPU):

    >>> from hpscaling.laws import tau_opt, lambda_opt, timescale, b_opt
    >>> round(tau_opt(20), 3)
    0.224
    >>> lam = lambda_opt(N=111e6, D=20 * 111e6, B=2**19, eta=1e-2)
    >>> abs(timescale(2**19, 1e-2, lam, 20 * 111e6) - tau_opt(20)) < 1e-12
    True
    >>> round(b_opt(4e10) / 1e6, 3)
    0.721
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import warnings
from typing import Any

__all__ = [
    "FIT_RANGE",
    "FIXED_LAMBDA",
    "KAPLAN_EXPONENT",
    "PAPER",
    "Constant",
    "PowerLinesConstants",
    "Recommendation",
    "b_crit",
    "b_opt",
    "check_positive",
    "constant_tau_lambda",
    "kaplan_batch",
    "lambda_opt",
    "recommend",
    "scale_lr",
    "tau_opt",
    "timescale",
]

#: The usual fixed weight decay (GPT-3, LLaMA, most recipes): the "no law" baseline.
FIXED_LAMBDA = 0.1

#: Kaplan et al. (2020, arXiv 2001.08361, eq. 6.4 / Fig. 14): compute-efficient batch ∝ C^0.24.
KAPLAN_EXPONENT = 0.24


@dataclasses.dataclass(frozen=True)
class Constant:
    """One fitted constant: its value, where it comes from, and whether that was checked."""

    value: float | None
    provenance: str
    verified: bool


@dataclasses.dataclass(frozen=True)
class PowerLinesConstants:
    """The constants of the laws (frozen). ``PAPER`` holds the paper's; pass your own anywhere.

    Attributes:
        c_tau, m_tau: τ_opt = c_tau · TPP^m_tau (Law 2).
        c_opt_seq, m_opt: B_opt = c_opt_seq · D^m_opt in ``seq_len``-token sequences (Law 3).
        seq_len: the sequence length B_opt's coefficient is expressed in.
        c_crit, m_crit: B_crit = c_crit · D^m_crit in tokens (Law 4); ``c_crit`` unconfirmed.
    """

    c_tau: Constant
    m_tau: Constant
    c_opt_seq: Constant
    m_opt: Constant
    seq_len: int
    c_crit: Constant
    m_crit: Constant

    def value(self, name: str) -> float:
        constant = getattr(self, name)
        if constant.value is None:
            raise ValueError(f"consts.{name}: no value ({constant.provenance})")
        return float(constant.value)


_SOURCE = "Bergsma et al., Power Lines (arXiv 2505.13738, NeurIPS 2025)"

#: The paper's constants with provenance. ``c_crit`` is unconfirmed (``value=None``): the paper
#: gives B_crit's exponent (0.46–0.47) in the text but its coefficient only in a figure.
PAPER = PowerLinesConstants(
    c_tau=Constant(1.084, f"{_SOURCE}, Law 2 fit over 111M–3.3B, TPP 20–1280 (R²=0.975)", True),
    m_tau=Constant(-0.527, f"{_SOURCE}, Law 2 exponent", True),
    c_opt_seq=Constant(0.0306, f"{_SOURCE}, Law 3, B in 2048-token sequences, D in tokens", True),
    m_opt=Constant(0.383, f"{_SOURCE}, Law 3 exponent (R²≈0.98)", True),
    seq_len=2048,
    c_crit=Constant(None, f"{_SOURCE}, Law 4 coefficient: only in Fig. 1 (right), unread", False),
    m_crit=Constant(
        0.465, f"{_SOURCE}, Law 4 exponent: the text gives 0.46–0.47 (R²≈0.94); midpoint", False
    ),
)

#: Where the paper's fits hold: TPP 20–1280, N 111M–3.3B parameters; D follows from both.
FIT_RANGE = {"tpp": (20.0, 1280.0), "N": (111e6, 3.3e9), "D": (20 * 111e6, 1280 * 3.3e9)}


def check_positive(name: str, value: Any, allow_zero: bool = False) -> float:
    """``value`` as a float if it is a finite real number > 0 (>= 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: expected a finite number {bound}, got {value!r}")
    return v


def _check_consts(consts: Any) -> PowerLinesConstants:
    if not isinstance(consts, PowerLinesConstants):
        raise TypeError(f"consts: expected PowerLinesConstants, got {type(consts).__name__}")
    return consts


def timescale(
    B_tokens: float, eta: float, lam: float, D_tokens: float, strict: bool = False
) -> float:
    """The AdamW timescale as a fraction of training, τ = B/(ηλD) (coupled decay).

    AdamW (PyTorch, optax) multiplies the weights by (1 − ηλ) every step, so the weights are an
    EMA of the updates with timescale 1/(ηλ) steps; over S = D/B steps that is τ = B/(ηλD).

    Args:
        B_tokens: batch size in tokens (> 0).
        eta: peak learning rate (> 0).
        lam: weight decay (>= 0). λ = 0 means no EMA: τ = ∞, with a warning (an error if ``strict``).
        D_tokens: training tokens (> 0).
        strict: raise instead of returning ∞ for λ = 0.
    """
    B = check_positive("B_tokens", B_tokens)
    e = check_positive("eta", eta)
    lam_v = check_positive("lam", lam, allow_zero=True)
    D = check_positive("D_tokens", D_tokens)
    if lam_v == 0.0:
        if strict:
            raise ValueError("lam: 0 gives an infinite timescale (strict=True)")
        warnings.warn("timescale: lam=0 gives an infinite timescale", RuntimeWarning, stacklevel=2)
        return math.inf
    return B / (e * lam_v * D)


def tau_opt(tpp: float, consts: PowerLinesConstants = PAPER) -> float:
    """Law 2: the optimal timescale τ_opt = c_τ · TPP^m_τ (TPP = D/N, tokens per parameter)."""
    t = check_positive("tpp", tpp)
    c = _check_consts(consts)
    return c.value("c_tau") * t ** c.value("m_tau")


def lambda_opt(
    N: float, D: float, B: float, eta: float, consts: PowerLinesConstants = PAPER
) -> float:
    """The weight decay that puts τ at τ_opt(D/N): λ = B / (η · D · τ_opt(D/N)); B, D in tokens."""
    n = check_positive("N", N)
    d = check_positive("D", D)
    b = check_positive("B", B)
    e = check_positive("eta", eta)
    return b / (e * d * tau_opt(d / n, consts))


_UNITS = ("tokens", "sequences")


def b_opt(
    D: float, unit: str = "tokens", seq_len: int = 2048, consts: PowerLinesConstants = PAPER
) -> float:
    """Law 3: the loss-optimal batch B_opt = c · D^m (D in tokens), in tokens or sequences.

    The paper's coefficient is in ``consts.seq_len``-token sequences (2048); ``unit="sequences"``
    returns sequences of ``seq_len`` tokens.
    """
    d = check_positive("D", D)
    if unit not in _UNITS:
        raise ValueError(f"unit: expected one of {_UNITS}, got {unit!r}")
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len: expected an int >= 1, got {seq_len!r}")
    c = _check_consts(consts)
    tokens = c.value("c_opt_seq") * c.seq_len * d ** c.value("m_opt")
    return tokens if unit == "tokens" else tokens / seq_len


def b_crit(
    D: float,
    consts: PowerLinesConstants = PAPER,
    allow_unverified: bool = False,
    c_crit: float | None = None,
) -> float:
    """Law 4: the critical batch B_crit = c_crit · D^m_crit in tokens.

    The paper's coefficient is not confirmed, so this needs a ``c_crit`` of your own (or constants
    whose ``c_crit`` is set and verified), or ``allow_unverified=True`` to use unverified ones.
    """
    d = check_positive("D", D)
    c = _check_consts(consts)
    if c_crit is not None:
        coefficient = check_positive("c_crit", c_crit)
    else:
        if c.c_crit.value is None:
            raise ValueError(
                "c_crit: the B_crit coefficient is unknown in these constants "
                f"({c.c_crit.provenance}); pass c_crit= (e.g. from estimate_b_crit)"
            )
        if not c.c_crit.verified and not allow_unverified:
            raise ValueError(
                "allow_unverified: consts.c_crit is not verified; pass allow_unverified=True to "
                "use it anyway, or a c_crit of your own"
            )
        coefficient = float(c.c_crit.value)
    if not c.m_crit.verified and not allow_unverified and c_crit is None:
        raise ValueError("allow_unverified: consts.m_crit is not verified")
    return coefficient * d ** c.value("m_crit")


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """What :func:`recommend` proposes; batch sizes in tokens, ``steps`` = D / B_used.

    ``B_crit`` is None when no confirmed coefficient is known (pass ``c_crit``).
    """

    N: float
    D: float
    eta: float
    tpp: float
    B_opt: float
    B_crit: float | None
    B_used: float
    tau_opt: float
    lambda_opt: float
    steps: float
    warnings: tuple[str, ...]


def _outside(name: str, value: float, bounds: tuple[float, float]) -> str | None:
    lo, hi = bounds
    if value < lo or value > hi:
        return f"{name}={value:.4g} is outside the paper's fitted range [{lo:.4g}, {hi:.4g}]"
    return None


def recommend(
    N: float,
    D: float,
    eta: float,
    B: float | None = None,
    seq_len: int = 2048,
    round_to_pow2: bool = False,
    consts: PowerLinesConstants = PAPER,
    c_crit: float | None = None,
) -> Recommendation:
    """Batch size and weight decay for a run of N parameters on D tokens at peak LR ``eta``.

    Args:
        N: parameters (> 0; the paper counts non-embedding parameters of μP GPT-2-style models).
        D: training tokens (> 0).
        eta: peak learning rate (> 0).
        B: the batch you will use, in tokens; default B_opt(D) (rounded to whole sequences).
        seq_len: tokens per sequence, for rounding B to whole sequences.
        round_to_pow2: round B_used to a power-of-two number of sequences.
        consts: the law constants.
        c_crit: a B_crit coefficient (tokens) of your own; without it ``B_crit`` is None.

    Returns:
        A :class:`Recommendation`. ``warnings`` names every extrapolation: TPP outside [20, 1280],
        N or D outside the fitted range, B_used above B_crit (Law 1 breaks there).

    Example:
        >>> r = recommend(N=111e6, D=20 * 111e6, eta=1e-2, seq_len=2048)
        >>> round(r.tau_opt, 3), r.warnings
        (0.224, ())
    """
    n = check_positive("N", N)
    d = check_positive("D", D)
    e = check_positive("eta", eta)
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len: expected an int >= 1, got {seq_len!r}")
    tpp = d / n
    best = b_opt(d, consts=consts)
    crit = b_crit(d, consts=consts, c_crit=c_crit) if c_crit is not None else None
    used = check_positive("B", B) if B is not None else max(1.0, round(best / seq_len)) * seq_len
    if round_to_pow2:
        sequences = max(1.0, used / seq_len)
        used = float(2 ** round(math.log2(sequences))) * seq_len
    notes = [
        w
        for w in (
            _outside("TPP", tpp, FIT_RANGE["tpp"]),
            _outside("N", n, FIT_RANGE["N"]),
            _outside("D", d, FIT_RANGE["D"]),
        )
        if w
    ]
    if crit is not None and used > crit:
        notes.append(f"B={used:.4g} tokens exceeds B_crit={crit:.4g}: λ ∝ B (Law 1) breaks there")
    tau = tau_opt(tpp, consts)
    return Recommendation(
        N=n,
        D=d,
        eta=e,
        tpp=tpp,
        B_opt=best,
        B_crit=crit,
        B_used=used,
        tau_opt=tau,
        lambda_opt=used / (e * d * tau),
        steps=d / used,
        warnings=tuple(notes),
    )


# ----------------------------------------------------------------------------- baselines


def constant_tau_lambda(tau: float, B: float, eta: float, D: float) -> float:
    """Wang & Aitchison (arXiv 2405.13698): keep τ at one value across scales, λ = B/(ητD)."""
    t = check_positive("tau", tau)
    return check_positive("B", B) / (check_positive("eta", eta) * t * check_positive("D", D))


_LR_RULES = ("sqrt", "linear")


def scale_lr(eta_ref: float, B_ref: float, B: float, rule: str = "sqrt") -> float:
    """The LR-scaling baseline at fixed λ: η = η_ref · (B/B_ref)^{1/2 or 1}."""
    e = check_positive("eta_ref", eta_ref)
    ratio = check_positive("B", B) / check_positive("B_ref", B_ref)
    if rule not in _LR_RULES:
        raise ValueError(f"rule: expected one of {_LR_RULES}, got {rule!r}")
    return e * (math.sqrt(ratio) if rule == "sqrt" else ratio)


def kaplan_batch(C: float, C_ref: float, B_ref: float, exponent: float = KAPLAN_EXPONENT) -> float:
    """The compute-based batch baseline (Kaplan et al. 2020): B = B_ref · (C / C_ref)^0.24.

    Kaplan's batch depends on compute C ≈ 6ND alone; Power Lines' B_opt on D alone. Anchor both
    at one (C_ref, B_ref) to compare them away from it.
    """
    c = check_positive("C", C)
    return check_positive("B_ref", B_ref) * (c / check_positive("C_ref", C_ref)) ** float(exponent)
