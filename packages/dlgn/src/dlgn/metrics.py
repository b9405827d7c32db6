"""Metrics of a logic gate network: discrete and train-mode accuracy, the gap, unused gates.

* Discrete accuracy: the eval-mode circuit ``onehot(argmax z)``.
* Train-mode accuracy: the training forward without gradients: the softmax mixture for DLGN, one
  freshly sampled circuit for GLGN (as the official ``eval_mode(mode=True)``); pass a generator
  so that the metric neither varies from call to call nor consumes the training noise.
* Gap = train-mode accuracy − discrete accuracy.
* Unused fraction (our definition; the paper's could not be checked): a neuron is unused when no
  path reaches GroupSum through inputs that the downstream gates depend on. Gates {0, 15} depend
  on nothing, {3, 12} only on ``a``, {5, 10} only on ``b``. Last-layer neurons feed GroupSum
  directly and count as used.
"""

from __future__ import annotations

import contextlib

import torch

from .layers import Circuit, LogicNet

__all__ = [
    "discrete_accuracy",
    "discretization_gap",
    "gate_histogram",
    "mean_max_softmax",
    "train_mode_accuracy",
    "unused_fraction",
    "unused_masks",
]

# Gates whose output does not depend on input a (resp. b).
_IGNORES_A = torch.tensor([i in (0, 15, 5, 10) for i in range(16)])
_IGNORES_B = torch.tensor([i in (0, 15, 3, 12) for i in range(16)])


@contextlib.contextmanager
def _mode(net: torch.nn.Module, training: bool):
    before = net.training
    net.train(training)
    try:
        yield
    finally:
        net.train(before)


@contextlib.contextmanager
def _noise_from(net: LogicNet, generator: torch.Generator | None):
    layers = net.logic_layers
    before = [m.generator for m in layers]
    if generator is not None:
        for m in layers:
            m.generator = generator
    try:
        yield
    finally:
        for m, g in zip(layers, before):
            m.generator = g


def _accuracy(scores: torch.Tensor, y: torch.Tensor) -> float:
    return (scores.argmax(-1) == y).double().mean().item()


def _check_xy(net, x, y):
    if not isinstance(net, LogicNet):
        raise TypeError(f"net: expected a LogicNet, got {type(net).__name__}")
    if not isinstance(y, torch.Tensor) or y.shape != (x.shape[0],):
        raise ValueError(f"y: expected ({x.shape[0]},) labels, got {getattr(y, 'shape', y)}")


@torch.no_grad()
def discrete_accuracy(
    net: LogicNet, x: torch.Tensor, y: torch.Tensor, batch_size: int = 4096
) -> float:
    """Accuracy of the discretized circuit (eval mode) on (N, in) inputs and (N,) labels.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> net = LogicNet.from_widths(6, [8], num_classes=2)
        >>> 0.0 <= discrete_accuracy(net, torch.rand(6, 6).round(), torch.zeros(6).long()) <= 1.0
        True
    """
    _check_xy(net, x, y)
    with _mode(net, False):
        scores = torch.cat([net(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])
    return _accuracy(scores, y)


@torch.no_grad()
def train_mode_accuracy(
    net: LogicNet,
    x: torch.Tensor,
    y: torch.Tensor,
    generator: torch.Generator | None = None,
) -> float:
    """Accuracy of the training-mode forward (mixture for softmax, one sampled circuit for gumbel).

    The whole set goes through one forward call, so a ``gumbel`` net is scored on one circuit.
    ``generator`` (if given) replaces every layer's noise generator for this call only.
    """
    _check_xy(net, x, y)
    with _mode(net, True), _noise_from(net, generator):
        return _accuracy(net(x), y)


def discretization_gap(
    net: LogicNet, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator | None = None
) -> float:
    """Train-mode accuracy − discrete accuracy."""
    return train_mode_accuracy(net, x, y, generator) - discrete_accuracy(net, x, y)


def _circuit(net: LogicNet | Circuit) -> Circuit:
    if isinstance(net, LogicNet):
        return net.discretize()
    if isinstance(net, Circuit):
        return net
    raise TypeError(f"net: expected a LogicNet or a Circuit, got {type(net).__name__}")


def unused_masks(net: LogicNet | Circuit) -> list[torch.Tensor]:
    """Per layer, an (out_l,) bool mask of the unused neurons (see the module docstring)."""
    c = _circuit(net)
    used = [torch.zeros(n, dtype=torch.bool) for n in c.widths]
    used[-1][:] = True
    for depth in range(len(c.ids) - 1, 0, -1):
        ids, live = c.ids[depth], used[depth]
        reads_a = live & ~_IGNORES_A[ids]
        reads_b = live & ~_IGNORES_B[ids]
        used[depth - 1][c.ia[depth][reads_a]] = True
        used[depth - 1][c.ib[depth][reads_b]] = True
    return [~u for u in used]


def unused_fraction(net: LogicNet | Circuit) -> dict[str, object]:
    """The fraction of unused neurons, overall and per layer.

    Returns:
        ``{"total": float, "per_layer": [float, ...]}``.

    Example:
        >>> from dlgn import Circuit
        >>> t = torch.tensor
        >>> c = Circuit(
        ...     2, [t([3, 0]), t([5, 5])], [t([0, 0]), t([0, 0])], [t([1, 1]), t([1, 1])], 1, 1.0
        ... )
        >>> unused_fraction(c)  # layer 1 (gate B) reads only neuron 1 of layer 0
        {'total': 0.25, 'per_layer': [0.5, 0.0]}
    """
    masks = unused_masks(net)
    total = sum(int(m.sum()) for m in masks) / sum(m.numel() for m in masks)
    return {"total": total, "per_layer": [m.double().mean().item() for m in masks]}


def gate_histogram(net: LogicNet | Circuit) -> torch.Tensor:
    """(L, 16) int64: how many neurons of each layer run each gate id in the discrete circuit."""
    c = _circuit(net)
    return torch.stack([torch.bincount(ids, minlength=16) for ids in c.ids])


@torch.no_grad()
def mean_max_softmax(net: LogicNet) -> float:
    """The mean over all neurons of ``max softmax(z)``: how peaked the logits are (1/16 … 1)."""
    if not isinstance(net, LogicNet):
        raise TypeError(f"net: expected a LogicNet, got {type(net).__name__}")
    peaks = [torch.softmax(m.weight, -1).max(-1).values for m in net.logic_layers]
    return torch.cat(peaks).double().mean().item()
