"""CADSConfig: the solver's settings, checked on construction."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._checks import check_float, check_int
from .budget import Budget

__all__ = ["CADSConfig"]


@dataclass(frozen=True)
class CADSConfig:
    """Settings of the penalty solver (spec section 2; defaults from the spec).

    >>> CADSConfig(Budget(100, 32), outer_steps=50).probe_steps
    20
    """

    budget: Budget
    outer_steps: int
    penalty: float = 1.0
    rollouts: int = 4
    probe_fraction: float = 0.2
    outer_lr: float = 0.05
    clip_norm: float = 3.0
    granularity: str = "example"
    #: Train the K probe rollouts as one ``torch.func.vmap`` over stacked parameters (tiny
    #: models; ``cads.vmap``): same batches and values as the loop, refused with a ValueError
    #: for models with batch norm / dropout and for non-elementwise optimizers.
    vectorize: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.vectorize, bool):
            raise TypeError(f"vectorize must be a bool, got {type(self.vectorize).__name__}")
        if not isinstance(self.budget, Budget):
            raise TypeError(f"budget must be a Budget, got {type(self.budget).__name__}")
        check_int("outer_steps", self.outer_steps, low=1)
        if check_int("rollouts", self.rollouts, low=1) < 2:
            raise ValueError(
                f"rollouts must be >= 2 for the leave-one-out baseline, got {self.rollouts}"
            )
        tau = check_float("probe_fraction", self.probe_fraction)
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"probe_fraction must lie in (0, 1], got {tau}")
        for name in ("penalty", "outer_lr", "clip_norm"):
            value = check_float(name, getattr(self, name))
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be > 0 and finite, got {value}")
        if self.granularity not in ("example", "source"):
            raise ValueError(f"granularity must be 'example' or 'source', got {self.granularity!r}")

    @property
    def probe_steps(self) -> int:
        """ceil(tau * B) probe steps (at least 1)."""
        return max(1, math.ceil(self.probe_fraction * self.budget.steps))
