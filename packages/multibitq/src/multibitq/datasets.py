"""Offline data for the reduced reproduction: scikit-learn's digits and a synthetic image set.

``digits`` reads the 1797 8×8 images that ship inside the scikit-learn package (no download);
``synthetic_images`` draws a 10-class set of noisy, randomly shifted class templates, large enough
that an 80 % pruning rate still leaves thousands of samples per child.
"""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

__all__ = ["digits", "synthetic_images"]


def digits(test_size: int = 360, seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    """scikit-learn ``load_digits``: (N, 1, 8, 8) float32 images scaled by 1/16, int64 labels.

    The split is stratified and seeded (``test_size=360`` gives the 1437/360 split of the spec).

    Example:
        >>> train, test = digits()
        >>> len(train), len(test), tuple(train.tensors[0].shape[1:])
        (1437, 360, (1, 8, 8))
    """
    if isinstance(test_size, bool) or not isinstance(test_size, int) or not 10 <= test_size <= 1787:
        raise ValueError(f"test_size: expected an int in [10, 1787], got {test_size!r}")
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(bunch.target, dtype=torch.int64)
    idx_train, idx_test = train_test_split(
        torch.arange(len(y)).numpy(), test_size=test_size, stratify=y.numpy(), random_state=seed
    )
    idx_train, idx_test = torch.as_tensor(idx_train), torch.as_tensor(idx_test)
    return TensorDataset(x[idx_train], y[idx_train]), TensorDataset(x[idx_test], y[idx_test])


def synthetic_images(
    n: int = 10_000,
    size: int = 16,
    num_classes: int = 10,
    noise: float = 0.35,
    max_shift: int = 2,
    seed: int = 0,
) -> TensorDataset:
    """A labeled (n, 1, size, size) set: smoothed random class templates, shifted, plus noise.

    Each class has a fixed template (seeded by ``seed // 1000`` only, so train and test sets
    drawn with different ``seed`` share their classes); a sample is its class template rolled by
    up to ``max_shift`` pixels in each direction, scaled by a random contrast in [0.7, 1.3], plus
    Gaussian noise of std ``noise``, clamped to [0, 1].

    Example:
        >>> ds = synthetic_images(n=50, size=16)
        >>> tuple(ds.tensors[0].shape), int(ds.tensors[1].max()) < 10
        ((50, 1, 16, 16), True)
    """
    for name, value, low in (("n", n, 1), ("size", size, 4), ("num_classes", num_classes, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")
    if not isinstance(noise, (int, float)) or noise < 0:
        raise ValueError(f"noise: expected a number >= 0, got {noise!r}")
    g_templates = torch.Generator().manual_seed(10_007 + seed // 1000)
    raw = torch.rand(num_classes, 1, size, size, generator=g_templates)
    kernel = torch.ones(1, 1, 3, 3) / 9.0
    templates = torch.nn.functional.conv2d(raw, kernel, padding=1)
    templates = (templates - templates.amin(dim=(2, 3), keepdim=True)) / (
        templates.amax(dim=(2, 3), keepdim=True) - templates.amin(dim=(2, 3), keepdim=True)
    )
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, num_classes, (n,), generator=g)
    shifts = torch.randint(-max_shift, max_shift + 1, (n, 2), generator=g)
    contrast = 0.7 + 0.6 * torch.rand(n, 1, 1, 1, generator=g)
    x = templates[y] * contrast
    for i in range(n):
        x[i] = torch.roll(x[i], shifts=(int(shifts[i, 0]), int(shifts[i, 1])), dims=(1, 2))
    x = (x + noise * torch.randn(x.shape, generator=g)).clamp(0, 1)
    return TensorDataset(x.float(), y)
