"""The modules a user touches: :class:`LogicLayer`, :class:`GroupSum`, :class:`LogicNet`."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import torch
from torch import nn

from .functional import gumbel_st, random_connections, unique_connections
from .ops import BACKENDS, logic_layer

__all__ = ["Circuit", "GroupSum", "LogicLayer", "LogicNet"]

MODES = ("softmax", "gumbel", "hard_st")
CONNECTIONS = ("unique", "random")


def _positive_int(name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name}: expected an int > 0, got {value}")
    return value


def _positive_number(name: str, value) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    if not value > 0:
        raise ValueError(f"{name}: expected a number > 0, got {value}")
    return float(value)


class _GradFactor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


class LogicLayer(nn.Module):
    """A layer of two-input neurons, each learning one of the 16 Boolean gates.

    Training modes (``mode``):

    * ``softmax`` (DLGN): ``w = softmax(z)``, a real-valued mixture of the relaxed gates.
    * ``gumbel`` (GLGN): ``w = onehot(argmax(z + g))`` with one Gumbel draw ``g`` of shape
      (out, 16) per forward call, shared by the whole batch (one sampled circuit per step), and the
      straight-through Gumbel-softmax gradient at temperature ``gumbel_tau``.
    * ``hard_st`` (ablation): ``w = onehot(argmax z)`` with the softmax straight-through gradient.

    In eval mode every mode runs the discrete circuit ``onehot(argmax z)``.

    Wiring and the logits ``z ~ N(0, 1)`` are drawn from torch's global RNG at construction
    (seed with ``torch.manual_seed``); the Gumbel noise comes from ``generator``. Under DDP, seed
    ``generator`` alike on every rank so all ranks sample the same circuit each step.

    Args:
        in_dim: input features.
        out_dim: neurons.
        connections: ``unique`` (each input used; needs 2·out_dim ≥ in_dim) or ``random``.
        mode: ``softmax`` | ``gumbel`` | ``hard_st``.
        gumbel_tau: τ_g > 0 of the straight-through softmax.
        grad_factor: scales the gradient flowing into this layer's input.
        generator: the Gumbel noise's generator (None: the global RNG).
        backend: ``auto`` (Triton on CUDA, torch on CPU) | ``torch`` | ``triton`` | ``reference``.

    Shapes:
        (B, in_dim) float → (B, out_dim), same dtype.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> layer = LogicLayer(8, 6, mode="gumbel", generator=torch.Generator().manual_seed(1))
        >>> y = layer(torch.randint(0, 2, (5, 8)).float())
        >>> y.shape, bool(((y == 0) | (y == 1)).all())  # a sampled circuit keeps bits binary
        (torch.Size([5, 6]), True)
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        *,
        connections: str = "unique",
        mode: str = "softmax",
        gumbel_tau: float = 1.0,
        grad_factor: float = 1.0,
        generator: torch.Generator | None = None,
        backend: str = "auto",
    ):
        super().__init__()
        self.in_dim = _positive_int("in_dim", in_dim)
        self.out_dim = _positive_int("out_dim", out_dim)
        if connections not in CONNECTIONS:
            raise ValueError(f"connections: expected one of {CONNECTIONS}, got {connections!r}")
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(
                f"generator: expected a torch.Generator, got {type(generator).__name__}"
            )
        self.gumbel_tau = _positive_number("gumbel_tau", gumbel_tau)
        self.grad_factor = _positive_number("grad_factor", grad_factor)
        self.connections = connections
        self.mode = mode
        self.backend = backend
        self.generator = generator
        if connections == "unique":
            ia, ib = unique_connections(in_dim, out_dim)
        else:
            ia, ib = random_connections(in_dim, out_dim)
        self.register_buffer("ia", ia)
        self.register_buffer("ib", ib)
        self.weight = nn.Parameter(torch.randn(out_dim, 16))

    def gate_weights(self) -> torch.Tensor:
        """The (out, 16) weights this forward uses (draws fresh noise in ``gumbel`` training)."""
        z = self.weight
        if not self.training:
            return torch.zeros_like(z).scatter_(-1, z.detach().argmax(-1, keepdim=True), 1.0)
        if self.mode == "softmax":
            return torch.softmax(z, dim=-1)
        return gumbel_st(z, self.gumbel_tau, self.generator, noise=self.mode == "gumbel")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
        if not x.is_floating_point():
            raise TypeError(f"x: expected a floating dtype (float32/float64), got {x.dtype}")
        if x.ndim != 2 or x.shape[1] != self.in_dim:
            raise ValueError(f"x: expected shape (B, {self.in_dim}), got {tuple(x.shape)}")
        if self.grad_factor != 1.0 and x.requires_grad:
            x = _GradFactor.apply(x, self.grad_factor)
        return logic_layer(x, self.ia, self.ib, self.gate_weights(), self.backend)

    def gate_ids(self) -> torch.Tensor:
        """(out,) int64: the discrete circuit's gate per neuron, ``argmax z``."""
        return self.weight.detach().argmax(-1)

    def extra_repr(self) -> str:
        return (
            f"{self.in_dim}, {self.out_dim}, connections={self.connections!r}, mode={self.mode!r}, "
            f"gumbel_tau={self.gumbel_tau}"
        )


class GroupSum(nn.Module):
    """Class scores: class ``c`` sums neurons ``[c·m, (c+1)·m)``, ``m = n/k``, divided by ``tau``.

    Shapes:
        (B, n) → (B, k).

    Example:
        >>> GroupSum(2, tau=2.0)(torch.tensor([[1.0, 1.0, 0.0, 1.0]])).tolist()
        [[1.0, 0.5]]
    """

    def __init__(self, k: int, tau: float = 1.0):
        super().__init__()
        self.k = _positive_int("k", k)
        self.tau = _positive_number("tau", tau)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"x: expected a floating torch.Tensor, got {getattr(x, 'dtype', x)}")
        if x.ndim != 2 or x.shape[1] % self.k:
            raise ValueError(
                f"x: expected shape (B, n) with n % {self.k} == 0, got {tuple(x.shape)}"
            )
        return x.reshape(x.shape[0], self.k, -1).sum(-1) / self.tau

    def extra_repr(self) -> str:
        return f"k={self.k}, tau={self.tau}"


@dataclasses.dataclass
class Circuit:
    """A discretized logic gate network: per layer the gate ids and wiring, then GroupSum.

    Attributes:
        in_dim: input bits.
        ids: per layer, (out_l,) int64 gate ids.
        ia: per layer, (out_l,) int64 first-input indices.
        ib: per layer, (out_l,) int64 second-input indices.
        k: classes of the GroupSum.
        tau: the GroupSum's τ (packed counts are τ × the float scores).
    """

    in_dim: int
    ids: list[torch.Tensor]
    ia: list[torch.Tensor]
    ib: list[torch.Tensor]
    k: int
    tau: float

    @property
    def widths(self) -> list[int]:
        return [int(i.numel()) for i in self.ids]


class LogicNet(nn.Sequential):
    """Logic layers followed by a :class:`GroupSum` (an ``nn.Sequential``).

    Example:
        >>> _ = torch.manual_seed(0)
        >>> net = LogicNet.from_widths(16, [32, 32], num_classes=4, tau=8.0, mode="gumbel")
        >>> net(torch.rand(3, 16)).shape
        torch.Size([3, 4])
        >>> net.discretize().widths
        [32, 32]
    """

    @classmethod
    def from_widths(
        cls,
        in_dim: int,
        widths: Sequence[int],
        num_classes: int,
        tau: float = 1.0,
        **layer_kwargs,
    ) -> LogicNet:
        """``len(widths)`` :class:`LogicLayer` s (``layer_kwargs`` passed to each) and a GroupSum.

        The last width must be a multiple of ``num_classes``. ``connections`` may be one wiring
        for every layer or a list with one per layer (e.g. ``["random", "unique", "unique"]``
        where the input has too few distinct pairs for a unique first layer).
        """
        widths = list(widths)
        if not widths:
            raise ValueError("widths: expected at least one layer width, got []")
        _positive_int("num_classes", num_classes)
        if widths[-1] % num_classes:
            raise ValueError(
                f"widths: the last width must be a multiple of num_classes={num_classes}, "
                f"got {widths[-1]}"
            )
        dims = [in_dim, *widths]
        wiring = layer_kwargs.pop("connections", "unique")
        if isinstance(wiring, str):
            wiring = [wiring] * len(widths)
        wiring = list(wiring)
        if len(wiring) != len(widths):
            raise ValueError(
                f"connections: expected one wiring or one per layer ({len(widths)}), got {wiring!r}"
            )
        layers = [
            LogicLayer(dims[i], dims[i + 1], connections=wiring[i], **layer_kwargs)
            for i in range(len(widths))
        ]
        return cls(*layers, GroupSum(num_classes, tau))

    def __init__(self, *modules: nn.Module):
        super().__init__(*modules)
        if not modules or not isinstance(modules[-1], GroupSum):
            raise TypeError("modules: expected LogicLayer modules followed by a GroupSum")
        layers = list(modules[:-1])
        if not layers or not all(isinstance(m, LogicLayer) for m in layers):
            raise TypeError("modules: expected at least one LogicLayer before the GroupSum")
        for prev, nxt in itertools.pairwise(layers):
            if prev.out_dim != nxt.in_dim:
                raise ValueError(
                    f"modules: layer widths do not chain, {prev.out_dim} outputs feed a layer of "
                    f"in_dim={nxt.in_dim}"
                )
        if layers[-1].out_dim % modules[-1].k:
            raise ValueError(
                f"modules: GroupSum k={modules[-1].k} does not divide the last width "
                f"{layers[-1].out_dim}"
            )

    @property
    def logic_layers(self) -> list[LogicLayer]:
        return [m for m in self if isinstance(m, LogicLayer)]

    @property
    def group_sum(self) -> GroupSum:
        return self[-1]

    def discretize(self) -> Circuit:
        """The discrete circuit (eval mode): gate ids ``argmax z`` and wiring of every layer."""
        layers = self.logic_layers
        return Circuit(
            in_dim=layers[0].in_dim,
            ids=[m.gate_ids().cpu() for m in layers],
            ia=[m.ia.detach().cpu() for m in layers],
            ib=[m.ib.detach().cpu() for m in layers],
            k=self.group_sum.k,
            tau=self.group_sum.tau,
        )
