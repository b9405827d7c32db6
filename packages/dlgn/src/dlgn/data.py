"""Offline data for logic gate networks: thermometer encoding, the bundled digits, 2-XOR.

Nothing downloads: the digits come with scikit-learn (``sklearn.datasets.load_digits``, 1797
8×8 images with values 0–16), the 2-XOR task is generated.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["digits", "thermometer", "two_xor"]


def thermometer(x: torch.Tensor, thresholds: Sequence[float]) -> torch.Tensor:
    """Thermometer bits ``x > t`` for every threshold, threshold-major along the last axis.

    Args:
        x: (..., F) real inputs.
        thresholds: the T thresholds.

    Returns:
        (..., T·F) float32 of 0/1: block ``j`` holds ``x > thresholds[j]``.

    Example:
        >>> thermometer(torch.tensor([[3.0, 9.0]]), [4, 8]).tolist()
        [[0.0, 1.0, 0.0, 1.0]]
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.ndim < 1 or x.is_complex():
        raise ValueError(
            f"x: expected a real tensor of shape (..., F), got {x.dtype} {tuple(x.shape)}"
        )
    thresholds = list(thresholds)
    if not thresholds or not all(isinstance(t, (int, float)) for t in thresholds):
        raise ValueError(
            f"thresholds: expected a non-empty sequence of numbers, got {thresholds!r}"
        )
    return torch.cat([(x > t) for t in thresholds], dim=-1).to(torch.float32)


def digits(
    thresholds: Sequence[float] = (4, 8, 12), test_fraction: float = 0.2, seed: int = 0
) -> dict[str, torch.Tensor]:
    """scikit-learn's bundled digits, thermometer-encoded (192 bits for 3 thresholds).

    Returns:
        ``{"x_train", "y_train", "x_test", "y_test"}``; x float32 0/1 of shape (N, 64·T), y int64.
        The split is a seeded permutation (80/20 by default).
    """
    from sklearn.datasets import load_digits

    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction: expected a number in (0, 1), got {test_fraction!r}")
    bunch = load_digits()
    x = thermometer(torch.as_tensor(bunch.data, dtype=torch.float32), thresholds)
    y = torch.as_tensor(bunch.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = round(test_fraction * len(y))
    test, train = perm[:n_test], perm[n_test:]
    return {"x_train": x[train], "y_train": y[train], "x_test": x[test], "y_test": y[test]}


def two_xor(
    n_train: int = 8192, n_test: int = 2048, bits: int = 32, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Synthetic 2-XOR: uniform bits, 4 classes ``2·(x_i ⊕ x_j) + (x_k ⊕ x_l)``.

    ``i, j, k, l`` are four distinct positions drawn from ``seed`` (stored under ``"taps"``), so
    the task is not aligned with the ``unique`` wiring's neighbour pairs by construction.

    Example:
        >>> d = two_xor(64, 16, seed=0)
        >>> d["x_train"].shape, sorted(set(d["y_train"].tolist())) == [0, 1, 2, 3]
        (torch.Size([64, 32]), True)
    """
    if bits < 4:
        raise ValueError(f"bits: expected at least 4, got {bits}")
    g = torch.Generator().manual_seed(seed)
    taps = torch.randperm(bits, generator=g)[:4]
    x = torch.randint(0, 2, (n_train + n_test, bits), generator=g)
    i, j, k, l_ = taps.tolist()
    y = 2 * (x[:, i] ^ x[:, j]) + (x[:, k] ^ x[:, l_])
    x = x.to(torch.float32)
    return {
        "x_train": x[:n_train],
        "y_train": y[:n_train],
        "x_test": x[n_train:],
        "y_test": y[n_train:],
        "taps": taps,
    }
