"""Naive, readable reference implementations of dizo: the spec in code (float64-capable).

Everything here materialises the Gaussian direction ``z`` explicitly and works on any float dtype,
so the tests run it in float64. The torch z stream is fixed here: tensor ``i`` of a list perturbed
with seed ``s`` draws ``z_i = torch.randn(shape, generator=Generator().manual_seed(tensor_seed(s, i)))``
(float32 draws cast to the tensor's dtype). Only the fast paths in :mod:`dizo.ops` are used in
training; they draw the same stream (torch backend) or Triton's Philox stream (triton backend).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

_GOLDEN = 0x9E3779B1


def tensor_seed(seed: int, index: int) -> int:
    """The generator seed of tensor ``index`` under step seed ``seed`` (torch backend)."""
    return (int(seed) * 1_000_003 + int(index) * _GOLDEN) % (2**63 - 1)


def direction(tensors: Sequence[torch.Tensor], seed: int) -> list[torch.Tensor]:
    """The torch-backend direction z, one tensor per input, drawn on CPU in float32."""
    out = []
    for i, t in enumerate(tensors):
        g = torch.Generator().manual_seed(tensor_seed(seed, i))
        out.append(torch.randn(t.shape, generator=g, dtype=torch.float32).to(t.device, t.dtype))
    return out


def perturb(tensors: Sequence[torch.Tensor], seed: int, scale: float) -> list[torch.Tensor]:
    """Out of place: ``t + scale * z`` for every tensor."""
    return [t + scale * z for t, z in zip(tensors, direction(tensors, seed))]


def project(tensors, anchors, ratios) -> list[torch.Tensor]:
    """Out of place: ``a + r * (t - a)``; ``r == 1`` returns ``t`` unchanged."""
    return [
        t.clone() if float(r) == 1.0 else a + float(r) * (t - a)
        for t, a, r in zip(tensors, anchors, ratios)
    ]


def displacement_norms(tensors, anchors) -> torch.Tensor:
    """``||t - a||_2`` per tensor, in float64."""
    return torch.stack(
        [(t.double() - a.double().to(t.device)).norm() for t, a in zip(tensors, anchors)]
    ).cpu()


def mezo_step(
    params: list[torch.Tensor],
    loss: Callable[[list[torch.Tensor]], float],
    seed: int,
    lr: float,
    eps: float,
    weight_decay: float = 0.0,
    decay_mask: Sequence[bool] | None = None,
) -> tuple[list[torch.Tensor], float, float]:
    """One MeZO (SPSA) step, out of place: returns ``(new_params, projected_grad, loss_plus)``.

    ``loss(params)`` evaluates the objective at the given parameters. The update is
    ``theta - lr * (g * z + weight_decay * theta)`` with ``g = (L(theta + eps z) - L(theta - eps z)) / (2 eps)``.
    """
    z = direction(params, seed)
    lp = float(loss([p + eps * zi for p, zi in zip(params, z)]))
    lm = float(loss([p - eps * zi for p, zi in zip(params, z)]))
    g = (lp - lm) / (2 * eps)
    mask = decay_mask if decay_mask is not None else [True] * len(params)
    new = [
        p - lr * (g * zi + (weight_decay * p if m else 0.0)) for p, zi, m in zip(params, z, mask)
    ]
    return new, g, lp


def projection_round(
    selected: list[torch.Tensor],
    anchors: list[torch.Tensor],
    loss: Callable[[list[torch.Tensor]], float],
    us: Sequence[torch.Tensor],
    proj_eps: float,
    step_size: float,
    tau: float,
) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """One DiZO projection round (``len(us)`` iterations), out of place.

    ``us[k]`` is the raw N(0, 1) draw (one value per selected tensor) of iteration ``k``;
    ``loss(k, selected_params)`` evaluates the objective on the k-th projection batch. Returns
    ``(projected, gamma, t)`` where ``t`` are the displacement norms at the start of the round.
    """
    t = displacement_norms(selected, anchors)
    live = t > 0
    gamma = t.clone()
    bound = tau / proj_eps * t

    def ratios(gam):
        return [float(gam[i] / t[i]) if live[i] else 1.0 for i in range(len(selected))]

    for k, u in enumerate(us):
        u = torch.maximum(torch.minimum(u.double(), bound), -bound)
        lp = float(loss(k, project(selected, anchors, ratios(gamma + proj_eps * u))))
        lm = float(loss(k, project(selected, anchors, ratios(gamma - proj_eps * u))))
        h = (lp - lm) / (2 * proj_eps)
        gamma = torch.minimum(
            torch.maximum(gamma - step_size * t * h * u, (1 - tau) * t), (1 + tau) * t
        )
    return project(selected, anchors, ratios(gamma)), gamma, t
