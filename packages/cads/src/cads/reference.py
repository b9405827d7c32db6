"""Float64 reference: least squares trained by full-batch gradient descent, where A_B has a
closed form, and the exact selection objective Phi(s) and its gradient by enumeration (n <= 12).

Inner problem on mask m: L_m(theta) = 1/(2|m|) sum_{i in m} (x_i . theta - y_i)^2, Hessian
H_m = X_m^T X_m / |m|, gradient H_m theta - c_m. B steps of gradient descent at step eta give

    theta_B = theta_0 - Q diag(phi(lambda)) Q^T (H_m theta_0 - c_m),
    phi(lambda) = (1 - (1 - eta lambda)^B) / lambda   (eta B at lambda = 0),

which is theta*_m + (I - eta H_m)^B (theta_0 - theta*_m) when H_m is invertible and stays exact
when it is not (|m| < d). The empty mask trains on nothing: theta_B = theta_0.
Outer objective: F(theta) = 1/(2 n_val) ||X_val theta - y_val||^2,
Phi(s) = sum_m p_s(m) F(A_B(m)).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from ._checks import check_float, check_int, check_tensor

__all__ = ["LeastSquaresProblem", "all_masks"]


def all_masks(n: int) -> torch.Tensor:
    """Every 0/1 mask of length n, shape [2^n, n] (bool); n <= 12."""
    n = check_int("n", n, low=1)
    if n > 12:
        raise ValueError(f"n must be <= 12 for enumeration, got {n}")
    return torch.tensor(list(itertools.product([0, 1], repeat=n)), dtype=torch.bool)


@dataclass
class LeastSquaresProblem:
    """Training pool (x [n, d], y [n]), validation (x_val, y_val), theta0 [d], GD step ``eta``."""

    x: torch.Tensor
    y: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    theta0: torch.Tensor
    eta: float

    def __post_init__(self) -> None:
        self.x = check_tensor("x", self.x, ndim=2).double()
        self.y = check_tensor("y", self.y, ndim=1).double()
        self.x_val = check_tensor("x_val", self.x_val, ndim=2).double()
        self.y_val = check_tensor("y_val", self.y_val, ndim=1).double()
        self.theta0 = check_tensor("theta0", self.theta0, ndim=1).double()
        self.eta = check_float("eta", self.eta)
        n, d = self.x.shape
        if self.y.shape != (n,):
            raise ValueError(f"y must have shape [{n}], got {tuple(self.y.shape)}")
        if self.x_val.shape[1] != d or self.y_val.shape != (self.x_val.shape[0],):
            raise ValueError("x_val must be [n_val, d] and y_val [n_val] with the pool's d")
        if self.theta0.shape != (d,):
            raise ValueError(f"theta0 must have shape [{d}], got {tuple(self.theta0.shape)}")
        if not self.eta > 0:
            raise ValueError(f"eta must be > 0, got {self.eta}")

    @property
    def n(self) -> int:
        return self.x.shape[0]

    def train(self, mask: torch.Tensor, steps: int) -> torch.Tensor:
        """theta after ``steps`` steps of gradient descent on the examples in ``mask`` (closed form)."""
        steps = check_int("steps", steps, low=0)
        if not isinstance(mask, torch.Tensor) or mask.shape != (self.n,):
            raise ValueError(f"mask must be a tensor of shape [{self.n}]")
        m = mask.to(torch.bool)
        if not m.any():
            return self.theta0.clone()
        xm, ym = self.x[m], self.y[m]
        h = xm.T @ xm / xm.shape[0]
        c = xm.T @ ym / xm.shape[0]
        lam, q = torch.linalg.eigh(h)
        lam = lam.clamp_min(0.0)
        small = lam < 1e-13
        safe = torch.where(small, torch.ones_like(lam), lam)
        phi = torch.where(
            small,
            torch.full_like(lam, self.eta * steps),
            (1 - (1 - self.eta * safe) ** steps) / safe,
        )
        return self.theta0 - q @ (phi * (q.T @ (h @ self.theta0 - c)))

    def train_iterative(self, mask: torch.Tensor, steps: int) -> torch.Tensor:
        """The same by running the steps (checks the closed form)."""
        m = mask.to(torch.bool)
        theta = self.theta0.clone()
        if not m.any():
            return theta
        xm, ym = self.x[m], self.y[m]
        for _ in range(steps):
            theta = theta - self.eta * xm.T @ (xm @ theta - ym) / xm.shape[0]
        return theta

    def val_loss(self, theta: torch.Tensor) -> float:
        r = self.x_val @ theta - self.y_val
        return 0.5 * (r @ r).item() / self.y_val.shape[0]

    def values(self, masks: torch.Tensor, steps: int) -> torch.Tensor:
        """F(A_B(m_k)) per mask [K]."""
        return torch.tensor(
            [self.val_loss(self.train(m, steps)) for m in masks], dtype=torch.float64
        )

    def exact(self, s: torch.Tensor, steps: int) -> tuple[float, torch.Tensor]:
        """(Phi(s), dPhi/ds) by enumerating all 2^n masks; the gradient by autograd of sum p_s(m) F_m."""
        s = check_tensor("s", s, ndim=1)
        if s.shape != (self.n,):
            raise ValueError(f"s must have shape [{self.n}], got {tuple(s.shape)}")
        masks = all_masks(self.n)
        f = self.values(masks, steps)
        leaf = s.detach().double().clone().requires_grad_(True)
        m = masks.double()
        prob = torch.prod(m * leaf + (1 - m) * (1 - leaf), dim=1)
        phi = (prob * f).sum()
        (grad,) = torch.autograd.grad(phi, leaf)
        return phi.item(), grad
