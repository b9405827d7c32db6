"""The vision stand-in of the reduced reproduction (spec section 5): scikit-learn's bundled
``load_digits`` (1797 8x8 images; the data ships inside the wheel, no download).

A training pool with four kinds of example: clean, clean but blurred (low-frequency), a wrong
label (symmetric noise: a uniformly drawn other class) and high-frequency pixel noise (white
Gaussian noise, std ``pixel_std`` on pixels scaled to [0, 1]); clean validation and test sets.
Eight sources for CADS-S: the four kinds, each split into two class groups (observed label < 5
or >= 5). ``mlp_factory`` builds the spec's MLP 64-128-10 from a seed, the same theta_0 on every
call, without touching the global RNG.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ._checks import check_float, check_int

__all__ = ["KINDS", "NoisyDigits", "mlp_factory", "noisy_digits"]

#: The kinds of pool example, in the order of their ids in ``NoisyDigits.kind``.
KINDS = ("clean", "blurred", "label_noise", "pixel_noise")


@dataclass
class NoisyDigits:
    """``x`` [n, 64] float32, ``y`` [n] observed labels, ``y_clean`` [n] true labels, ``kind`` [n]
    (index into ``KINDS``), ``sources`` [n] in [0, 8): kind + 4 * (observed label >= 5); clean
    ``val`` and ``test`` pairs."""

    x: torch.Tensor
    y: torch.Tensor
    y_clean: torch.Tensor
    kind: torch.Tensor
    sources: torch.Tensor
    val: tuple[torch.Tensor, torch.Tensor]
    test: tuple[torch.Tensor, torch.Tensor]

    @property
    def train(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x, self.y

    def makeup(self, selection: torch.Tensor) -> dict[str, float]:
        """The fraction of each kind in a selection (indices or bool mask), or, for source weights
        [8], in the mixture they draw."""
        if selection.is_floating_point():
            w = selection.double().clamp_min(0)
            w = w / w.sum()
            return {k: float(w[i] + w[i + 4]) for i, k in enumerate(KINDS)}
        kinds = self.kind[selection]
        return {k: float((kinds == i).double().mean()) for i, k in enumerate(KINDS)}


def noisy_digits(
    pool: int = 1200,
    val: int = 150,
    test: int = 447,
    label_noise: float = 0.15,
    pixel_noise: float = 0.15,
    blurred: float = 0.35,
    pixel_std: float = 0.5,
    seed: int = 0,
) -> NoisyDigits:
    """The noisy digits pool (defaults: the spec's 1200 / 150 / 447 split, 15 % label noise, 15 %
    pixel noise; half the remaining clean images blurred by a 3x3 box filter)."""
    from sklearn.datasets import load_digits

    pool = check_int("pool", pool, low=1)
    val = check_int("val", val, low=1)
    test = check_int("test", test, low=1)
    seed = check_int("seed", seed, low=0)
    fractions = {}
    for name, value in (
        ("label_noise", label_noise),
        ("pixel_noise", pixel_noise),
        ("blurred", blurred),
    ):
        value = check_float(name, value)
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must lie in [0, 1), got {value}")
        fractions[name] = value
    if sum(fractions.values()) >= 1.0:
        raise ValueError("label_noise + pixel_noise + blurred must be < 1 (some clean images)")
    pixel_std = check_float("pixel_std", pixel_std)
    if not pixel_std > 0:
        raise ValueError(f"pixel_std must be > 0, got {pixel_std}")
    digits = load_digits()
    total = len(digits.target)
    if pool + val + test > total:
        raise ValueError(f"pool + val + test must be <= {total}, got {pool + val + test}")
    x_all = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y_all = torch.tensor(digits.target, dtype=torch.long)
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(total, generator=g)
    tr, va, te = perm[:pool], perm[pool : pool + val], perm[pool + val : pool + val + test]
    x, y_clean = x_all[tr].clone(), y_all[tr]
    counts = [round(fractions[k] * pool) for k in ("blurred", "label_noise", "pixel_noise")]
    kind = torch.zeros(pool, dtype=torch.long)
    order = torch.randperm(pool, generator=g)
    start = 0
    for kind_id, count in zip((1, 2, 3), counts):
        kind[order[start : start + count]] = kind_id
        start += count
    blur = kind == 1
    if blur.any():
        img = x[blur].view(-1, 1, 8, 8)
        x[blur] = nn.functional.avg_pool2d(img, 3, 1, 1, count_include_pad=False).view(-1, 64)
    pix = kind == 3
    x[pix] = x[pix] + pixel_std * torch.randn(x[pix].shape, generator=g)
    y = y_clean.clone()
    lab = kind == 2
    y[lab] = (y[lab] + torch.randint(1, 10, (int(lab.sum()),), generator=g)) % 10
    sources = kind + 4 * (y >= 5).long()
    return NoisyDigits(x, y, y_clean, kind, sources, (x_all[va], y_all[va]), (x_all[te], y_all[te]))


def mlp_factory(seed: int, hidden: int = 128) -> Callable[[], nn.Module]:
    """A factory of the MLP 64-``hidden``-10 with the same initial weights on every call
    (PyTorch's default Linear init, drawn from a generator seeded by ``seed``)."""
    seed = check_int("seed", seed, low=0)
    hidden = check_int("hidden", hidden, low=1)
    g = torch.Generator().manual_seed(seed)
    shapes = [(hidden, 64), (hidden,), (10, hidden), (10,)]
    fan_in = [64, 64, hidden, hidden]
    init = [(torch.rand(s, generator=g) * 2 - 1) / fi**0.5 for s, fi in zip(shapes, fan_in)]

    def build() -> nn.Module:
        skip = nn.utils.skip_init  # no draw from the global RNG; the weights are copied below
        model = nn.Sequential(skip(nn.Linear, 64, hidden), nn.ReLU(), skip(nn.Linear, hidden, 10))
        with torch.no_grad():
            for p, v in zip(model.parameters(), init):
                p.copy_(v)
        return model

    return build
