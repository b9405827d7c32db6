"""Power Lines (Bergsma et al., NeurIPS 2025): AdamW timescale, weight-decay and batch-size laws.

The AdamW timescale τ = B/(ηλD) (coupled decay), the laws τ_opt(TPP), λ_opt, B_opt and B_crit,
a recommender, the fitters that produce such laws from your own sweeps, and the training
integration that sets an optimizer's weight decay from a timescale.

Example (CPU):

    >>> import hpscaling
    >>> r = hpscaling.recommend(N=111e6, D=20 * 111e6, eta=1e-2)
    >>> round(r.tau_opt, 3), round(r.B_opt)
    (0.224, 238070)
"""

from hpscaling.fit import (
    BCritFit,
    SeededTauLawFit,
    TauCell,
    TauLawFit,
    estimate_b_crit,
    fit_power_law,
    fit_tau_law,
    fit_tau_law_seeds,
)
from hpscaling.laws import (
    FIXED_LAMBDA,
    PAPER,
    Constant,
    PowerLinesConstants,
    Recommendation,
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
from hpscaling.optim import apply_timescale, decay_exempt, global_batch

__all__ = [
    "FIXED_LAMBDA",
    "PAPER",
    "BCritFit",
    "Constant",
    "PowerLinesConstants",
    "Recommendation",
    "SeededTauLawFit",
    "TauCell",
    "TauLawFit",
    "apply_timescale",
    "b_crit",
    "b_opt",
    "constant_tau_lambda",
    "decay_exempt",
    "estimate_b_crit",
    "fit_power_law",
    "fit_tau_law",
    "fit_tau_law_seeds",
    "global_batch",
    "kaplan_batch",
    "lambda_opt",
    "recommend",
    "scale_lr",
    "tau_opt",
    "timescale",
]
