"""Importance scores and bit-wise coreset selection.

The score of sample i for the child at ``bits`` is the norm of its cross-entropy gradient with
respect to the full-precision classifier (weight and bias):
``‖softmax(z) − e_y‖₂ · √(‖h‖² + 1)``, where ``h`` is the classifier's input (the pooled feature).
That is exact, because the per-sample gradient is ``(p − e_y)·[h; 1]ᵀ``, a rank-one matrix. It
needs one eval-mode forward per sample; ``score="el2n"`` drops the feature factor and
``score="grad_full"`` computes the full per-sample gradient norm over every parameter with
``torch.func`` (the expensive reference).

The sampler draws, per child and per round, ``k`` distinct indices with class quotas proportional
to the class frequencies (largest remainder), and within each class either samples without
replacement with probability ∝ score (Gumbel-top-k) or takes the top scores.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from multibitq.modules import SCORES, SELECTIONS, _check_model, using_bits
from multibitq.ops import check_bits

__all__ = ["BitwiseCoresetSampler", "class_quotas", "importance_scores", "recalibrate_bn"]

#: Added to every score before sampling, so a zero score keeps a (tiny) chance.
SCORE_EPS = 1e-12


def _as_dataset(dataset: Any) -> Dataset:
    if (
        isinstance(dataset, tuple)
        and len(dataset) == 2
        and all(isinstance(t, torch.Tensor) for t in dataset)
    ):
        dataset = TensorDataset(*dataset)
    if not isinstance(dataset, Dataset):
        raise TypeError(
            f"dataset: expected a torch Dataset of (x, y) pairs or a tuple (X, y) of tensors, "
            f"got {type(dataset).__name__}"
        )
    try:
        n = len(dataset)
    except TypeError:
        raise TypeError("dataset: expected a map-style Dataset with a length") from None
    if n == 0:
        raise ValueError("dataset: is empty")
    first = dataset[0]
    if not (isinstance(first, (tuple, list)) and len(first) == 2):
        raise ValueError(
            "dataset: expected labeled samples (x, y); its items are not pairs (unlabeled data "
            "cannot be scored)"
        )
    label = first[1]
    if isinstance(label, torch.Tensor):
        ok = label.numel() == 1 and not label.is_floating_point() and not label.is_complex()
    else:
        ok = isinstance(label, int) and not isinstance(label, bool)
    if not ok:
        raise ValueError(f"dataset: expected integer class labels, got {label!r}")
    return dataset


def _classifier(model: nn.Module) -> nn.Linear:
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    if not linears:
        raise ValueError("model: has no full-precision nn.Linear classifier to score with")
    return linears[-1]


def importance_scores(
    model: nn.Module,
    dataset: Any,
    bits: int,
    score: str = "grad_last_layer",
    batch_size: int = 256,
) -> torch.Tensor:
    """Per-sample importance of ``dataset`` for the child at ``bits``, shape (n,).

    Runs ``model`` in eval mode at ``bits`` (its training flag and bit-width are restored).

    Args:
        model: a model made multi-bit by :func:`convert_`, ending in a full-precision nn.Linear.
        dataset: a map-style Dataset of ``(x, y)`` with integer labels, or a tuple ``(X, y)``.
        bits: the child to score with (1–8 or 32).
        score: ``"grad_last_layer"`` (closed-form classifier-gradient norm), ``"el2n"``
            (``‖p − e_y‖``) or ``"grad_full"`` (per-sample gradient norm over every parameter).
        batch_size: samples per forward.

    Returns:
        Scores in the classifier's dtype, in dataset order.
    """
    _check_model(model)
    dataset = _as_dataset(dataset)
    bits = check_bits(bits)
    if score not in SCORES:
        raise ValueError(f"score: expected one of {SCORES}, got {score!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive int, got {batch_size!r}")
    classifier = _classifier(model)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False)
    was_training = model.training
    out = []
    features: list[torch.Tensor] = []
    handle = classifier.register_forward_hook(lambda m, args, output: features.append(args[0]))
    try:
        model.eval()
        with using_bits(model, bits):
            device = classifier.weight.device
            for x, y in loader:
                x = x.to(device)
                y = torch.as_tensor(y).reshape(-1).long().to(device)
                num_classes = classifier.out_features
                if int(y.min()) < 0 or int(y.max()) >= num_classes:
                    raise ValueError(
                        f"dataset: labels must lie in [0, {num_classes}), got "
                        f"[{int(y.min())}, {int(y.max())}]"
                    )
                if score == "grad_full":
                    out.append(_full_gradient_norms(model, x, y))
                    continue
                features.clear()
                with torch.no_grad():
                    logits = model(x)
                residual = torch.softmax(logits, dim=1) - F.one_hot(y, num_classes).to(logits)
                norms = residual.norm(dim=1)
                if score == "grad_last_layer":
                    h = features[-1].reshape(len(y), -1)
                    bias = 1.0 if classifier.bias is not None else 0.0
                    norms = norms * (h.square().sum(1) + bias).sqrt()
                out.append(norms)
    finally:
        handle.remove()
        model.train(was_training)
    return torch.cat(out).cpu()


def _full_gradient_norms(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """‖∇_θ CE(model(x_i), y_i)‖ per sample, over every parameter (torch.func, eval mode)."""
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    buffers = dict(model.named_buffers())

    def loss(p, xi, yi):
        logits = functional_call(model, (p, buffers), (xi.unsqueeze(0),))
        return F.cross_entropy(logits, yi.unsqueeze(0))

    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    return (
        torch.stack([g.reshape(len(y), -1).square().sum(1) for g in grads.values()]).sum(0).sqrt()
    )


def class_quotas(labels: torch.Tensor, k: int) -> dict[int, int]:
    """Per-class subset sizes ∝ class frequency, summing to ``k`` (largest remainder).

    Each quota is within one of ``k·n_c/n`` and at most ``n_c``; ties go to the lower class id.
    """
    classes, counts = torch.unique(labels, return_counts=True)
    n = int(counts.sum())
    exact = [k * int(c) / n for c in counts]
    quotas = [int(e) for e in exact]
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - quotas[i]), i))
    for i in order[: k - sum(quotas)]:
        quotas[i] += 1
    return {int(c): q for c, q in zip(classes, quotas, strict=True)}


class BitwiseCoresetSampler:
    """Per-child coresets: ``k`` distinct indices with class quotas, re-drawn each round.

    Args:
        labels: integer class labels of the training set, shape (n,).
        k: subset size per child, ``number of classes ≤ k ≤ n`` (``round((1 − p)·n)``).
        bits: the children (bit-widths) that get subsets.
        seed: the random stream is keyed by ``(seed, bits, round)``, so a draw is reproducible and
            differs across children and rounds.
        selection: ``"sample"`` (without replacement, probability ∝ score + 1e-12, by
            Gumbel-top-k) or ``"topk"`` (the largest scores of each class).

    Example:
        >>> labels = torch.arange(20) % 4
        >>> sampler = BitwiseCoresetSampler(labels, k=8, bits=(2, 32))
        >>> sampler.select(2, round=0).shape
        torch.Size([8])
    """

    def __init__(
        self,
        labels: Any,
        k: int,
        bits: Iterable[int],
        seed: int = 0,
        selection: str = "sample",
    ) -> None:
        if not isinstance(labels, torch.Tensor):
            raise TypeError(f"labels: expected a 1-D integer tensor, got {type(labels).__name__}")
        if (
            labels.dim() != 1
            or labels.is_floating_point()
            or labels.is_complex()
            or labels.dtype == torch.bool
        ):
            raise ValueError(
                f"labels: expected a 1-D integer tensor, got {labels.dtype} of shape {tuple(labels.shape)}"
            )
        if labels.numel() == 0:
            raise ValueError("labels: is empty")
        if isinstance(k, bool):
            raise TypeError("k: expected an int, got bool")
        try:
            k = operator.index(k)
        except TypeError:
            raise TypeError(f"k: expected an int, got {type(k).__name__}") from None
        self.labels = labels.detach().cpu().long()
        num_classes = int(torch.unique(self.labels).numel())
        if not num_classes <= k <= labels.numel():
            raise ValueError(
                f"k: expected between the number of classes ({num_classes}) and the number of "
                f"samples ({labels.numel()}), got {k}"
            )
        if isinstance(bits, (str, bytes)) or not isinstance(bits, Iterable):
            raise TypeError(f"bits: expected a sequence of bit-widths, got {bits!r}")
        self.bits = tuple(check_bits(b, "bits") for b in bits)
        if not self.bits:
            raise ValueError("bits: expected at least one bit-width")
        if selection not in SELECTIONS:
            raise ValueError(f"selection: expected one of {SELECTIONS}, got {selection!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed: expected an int, got {type(seed).__name__}")
        self.k, self.seed, self.selection = k, seed, selection
        self.quotas = class_quotas(self.labels, k)
        self._members = {c: torch.nonzero(self.labels == c).reshape(-1) for c in self.quotas}

    def generator(self, bits: int, round: int) -> torch.Generator:
        """The random stream of child ``bits`` at ``round``."""
        key = ((self.seed * 1_000_003 + round) * 1_009 + bits) % (2**63 - 1)
        return torch.Generator().manual_seed(key)

    def select(self, bits: int, scores: torch.Tensor | None = None, round: int = 0) -> torch.Tensor:
        """The subset of child ``bits`` at ``round``: ``k`` sorted distinct indices.

        Args:
            bits: one of the sampler's bit-widths.
            scores: non-negative importance, shape (n,); ``None`` draws uniformly (warm-up).
            round: the re-selection round (an epoch counter).
        """
        bits = check_bits(bits)
        if bits not in self.bits:
            raise ValueError(
                f"bits: expected one of the sampler's bit-widths {self.bits}, got {bits}"
            )
        if isinstance(round, bool) or not isinstance(round, int) or round < 0:
            raise ValueError(f"round: expected a non-negative int, got {round!r}")
        n = self.labels.numel()
        if scores is None:
            weights = torch.ones(n, dtype=torch.float64)
        else:
            if not isinstance(scores, torch.Tensor) or scores.shape != (n,):
                shape = (
                    tuple(scores.shape)
                    if isinstance(scores, torch.Tensor)
                    else type(scores).__name__
                )
                raise ValueError(f"scores: expected a tensor of shape ({n},), got {shape}")
            weights = scores.detach().cpu().double()
            if not torch.isfinite(weights).all() or (weights < 0).any():
                raise ValueError("scores: expected finite non-negative values")
        g = self.generator(bits, round)
        keys = (weights + SCORE_EPS).log()
        if self.selection == "sample" or scores is None:
            uniform = torch.rand(n, generator=g, dtype=torch.float64).clamp_min(1e-300)
            keys = keys - (-uniform.log()).log()  # + Gumbel(0, 1) noise
        chosen = []
        for c, q in self.quotas.items():
            members = self._members[c]
            order = torch.sort(keys[members], descending=True, stable=True).indices
            chosen.append(members[order[:q]])
        return torch.sort(torch.cat(chosen)).values

    def subsets(
        self, scores: dict[int, torch.Tensor] | None = None, round: int = 0
    ) -> dict[int, torch.Tensor]:
        """``{bits: select(bits, scores[bits], round)}`` for every child of the sampler."""
        if scores is not None and set(scores) != set(self.bits):
            raise ValueError(
                f"scores: expected one entry per bit-width {self.bits}, got {sorted(scores)}"
            )
        return {b: self.select(b, None if scores is None else scores[b], round) for b in self.bits}


def _batches(loader: Any, num_batches: int | None, name: str = "loader") -> Iterable[Any]:
    try:
        iterator = iter(loader)
    except TypeError:
        raise TypeError(
            f"{name}: expected an iterable of batches, got {type(loader).__name__}"
        ) from None
    for i, batch in enumerate(iterator):
        if num_batches is not None and i >= num_batches:
            return
        yield batch[0] if isinstance(batch, (tuple, list)) else batch


def recalibrate_bn(
    model: nn.Module, bits: int, loader: Any, num_batches: int | None = None
) -> nn.Module:
    """Re-estimate the BatchNorm statistics that serve ``bits`` (Any-Precision's unseen bit-widths).

    Each :class:`SwitchableBatchNorm2d` gets a BatchNorm for ``bits`` if it has none (parameters
    and statistics copied from its nearest trained bit-width, ties to the larger **[design]**), its
    running statistics are reset and re-estimated as the exact average over the batches
    (``momentum=None``), under ``no_grad``. Plain (shared and skip-path) BatchNorms are left alone:
    they serve every child. The model's mode and bit-width are restored; no parameter changes.

    Args:
        model: a model made multi-bit by :func:`convert_` with ``bn="switchable"``.
        bits: the bit-width to calibrate (1–8 or 32).
        loader: an iterable of inputs or of ``(x, y)`` batches (labels unused).
        num_batches: use at most this many batches (default: all).

    Returns:
        ``model``.
    """
    from multibitq.modules import SwitchableBatchNorm2d

    _check_model(model)
    bits = check_bits(bits)
    if num_batches is not None and (
        isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 1
    ):
        raise ValueError(f"num_batches: expected a positive int or None, got {num_batches!r}")
    switchable = [m for m in model.modules() if isinstance(m, SwitchableBatchNorm2d)]
    if not switchable:
        raise ValueError(
            "model: has no SwitchableBatchNorm2d (bn='shared' serves every bit-width as it is)"
        )
    batches = list(_batches(loader, num_batches))
    if not batches:
        raise ValueError("loader: yielded no batch")
    for m in switchable:
        bn = m.add_bits(bits)
        bn.reset_running_stats()
    was_training = model.training
    saved = [(m.bn[str(bits)], m.bn[str(bits)].momentum) for m in switchable]
    try:
        model.eval()
        for bn, _ in saved:
            bn.train()
            bn.momentum = None  # cumulative average over the batches
        with torch.no_grad(), using_bits(model, bits):
            for x in batches:
                model(x)
    finally:
        for bn, momentum in saved:
            bn.momentum = momentum
        model.train(was_training)
    return model
