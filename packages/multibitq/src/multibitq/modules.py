"""Multi-bit layers, the model conversion and the PreAct ResNet of Any-Precision.

One set of weights serves every child; the current bit-width is plain module state (an ``int``
attribute, not a buffer), set for the whole model by :func:`using_bits`. So switching bits never
touches a parameter or buffer: only the BatchNorm running statistics that a training forward
updates depend on which child ran.

The layout follows Any-Precision (SHI-Labs/Any-Precision-DNNs, ``models/resnet_quan.py``): the
first conv, the classifier and the 1×1 skip convs (with their BatchNorm) stay full precision, and
the activation is ``relu`` at 32 bits but ``clamp(0, 1)`` plus rounding below.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import operator
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from multibitq.ops import (
    CORRECTIONS,
    GRANULARITIES,
    check_bits,
    correct_weight_bias,
    quantize_activation,
    quantize_weight,
)
from multibitq.reference import FULL_PRECISION

__all__ = [
    "BN_MODES",
    "SCORES",
    "SELECTIONS",
    "SKIP_NAMES",
    "MultiBitConfig",
    "QAct",
    "QConv2d",
    "QLinear",
    "SwitchableBatchNorm2d",
    "convert_",
    "current_bits",
    "multibit_modules",
    "resnet_multibit",
    "set_bits",
    "using_bits",
]

#: Accepted ``bn`` values: one shared BatchNorm (ours) or one per bit-width (Any-Precision).
BN_MODES = ("shared", "switchable")
#: Accepted importance scores (see the spec §2).
SCORES = ("grad_last_layer", "el2n", "grad_full")
#: Accepted subset selections.
SELECTIONS = ("sample", "topk")
#: A module whose qualified name has one of these components is on a skip path and stays FP.
SKIP_NAMES = ("skip_conv", "skip_bn", "shortcut", "downsample")


@dataclasses.dataclass(frozen=True)
class MultiBitConfig:
    """How a model is made multi-bit and trained.

    Args:
        bits: the trained bit-widths (each in 1–8 or 32), distinct; stored in descending order.
        correction: ``"mean_var"`` (ours), ``"mean"`` or ``"none"`` (plain joint training).
        granularity: statistics of the correction per output ``"channel"`` or per ``"tensor"``.
        bn: ``"shared"`` (one BatchNorm for every child) or ``"switchable"`` (Any-Precision).
        prune_rate: fraction of the data each child skips per epoch, in [0, 1).
        score: ``"grad_last_layer"``, ``"el2n"`` or ``"grad_full"``.
        selection: ``"sample"`` (Gumbel-top-k ∝ score) or ``"topk"``.
        rescore_every: epochs between re-scoring, ≥ 1.
        seed: seed of every random choice of the method.
        stats_grad: let the correction's gradient flow through its statistics.
    """

    bits: tuple[int, ...] = (1, 2, 4, 8, 32)
    correction: str = "mean_var"
    bn: str = "shared"
    prune_rate: float = 0.8
    score: str = "grad_last_layer"
    selection: str = "sample"
    rescore_every: int = 3
    seed: int = 0
    granularity: str = "channel"
    stats_grad: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.bits, (str, bytes)) or not isinstance(self.bits, Iterable):
            raise TypeError(f"bits: expected a sequence of bit-widths, got {self.bits!r}")
        bits = tuple(check_bits(b, "bits") for b in self.bits)
        if not bits:
            raise ValueError("bits: expected at least one bit-width, got ()")
        if len(set(bits)) != len(bits):
            raise ValueError(f"bits: expected distinct bit-widths, got {bits}")
        object.__setattr__(self, "bits", tuple(sorted(bits, reverse=True)))
        _check_choice(self.correction, CORRECTIONS, "correction")
        _check_choice(self.granularity, GRANULARITIES, "granularity")
        _check_choice(self.bn, BN_MODES, "bn")
        _check_choice(self.score, SCORES, "score")
        _check_choice(self.selection, SELECTIONS, "selection")
        p = self.prune_rate
        if isinstance(p, bool) or not isinstance(p, (int, float)):
            raise TypeError(f"prune_rate: expected a float in [0, 1), got {p!r}")
        if not (0 <= p < 1) or math.isnan(p):
            raise ValueError(f"prune_rate: expected a float in [0, 1), got {p}")
        for name in ("rescore_every", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool):
                raise TypeError(f"{name}: expected an int, got bool")
            try:
                object.__setattr__(self, name, operator.index(value))
            except TypeError:
                raise TypeError(f"{name}: expected an int, got {type(value).__name__}") from None
        if self.rescore_every < 1:
            raise ValueError(f"rescore_every: expected an int >= 1, got {self.rescore_every}")
        if not isinstance(self.stats_grad, bool):
            raise TypeError(f"stats_grad: expected a bool, got {type(self.stats_grad).__name__}")


def _check_choice(value: Any, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}")


def _shallow_state(module: nn.Module) -> dict[str, Any]:
    """A module's attributes, its parameter/buffer/hook dicts copied (the tensors are shared)."""
    return {k: (v.copy() if isinstance(v, dict) else v) for k, v in module.__dict__.items()}


class _MultiBit:
    """Mixin: the current bit-width as plain state (never a buffer)."""

    bits: int = FULL_PRECISION


class _QuantizedWeight(_MultiBit):
    correction: str
    granularity: str
    stats_grad: bool

    def _setup(self, cfg: MultiBitConfig) -> None:
        self.bits = FULL_PRECISION
        self.correction = cfg.correction
        self.granularity = cfg.granularity
        self.stats_grad = cfg.stats_grad

    def effective_weight(self, bits: int | None = None) -> torch.Tensor:
        """The weight the child at ``bits`` (default: the current one) computes with."""
        bits = self.bits if bits is None else check_bits(bits)
        w_ref = quantize_weight(self.weight, FULL_PRECISION)
        if bits == FULL_PRECISION:
            return w_ref
        w_q = quantize_weight(self.weight, bits)
        if self.correction == "none":
            return w_q
        return correct_weight_bias(
            w_q,
            w_ref,
            granularity=self.granularity,
            stats_grad=self.stats_grad,
            mode=self.correction,
        )

    def _extra(self) -> str:
        return f"bits={self.bits}, correction={self.correction!r}, granularity={self.granularity!r}"


class QConv2d(_QuantizedWeight, nn.Conv2d):
    """``nn.Conv2d`` whose weight is quantized to the model's current bit-width (and corrected).

    Build it with :meth:`from_conv` or through :func:`convert_`; inputs are (N, C, H, W).
    """

    def __init__(self, *args: Any, cfg: MultiBitConfig | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._setup(cfg or MultiBitConfig())

    @classmethod
    def from_conv(cls, conv: nn.Conv2d, cfg: MultiBitConfig) -> QConv2d:
        """A QConv2d sharing ``conv``'s parameters (no copy)."""
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.__dict__.update(_shallow_state(conv))
        new.training = conv.training
        new._setup(cfg)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(x, self.effective_weight(), self.bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, {self._extra()}"


class QLinear(_QuantizedWeight, nn.Linear):
    """``nn.Linear`` whose weight is quantized to the model's current bit-width (and corrected)."""

    def __init__(self, *args: Any, cfg: MultiBitConfig | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._setup(cfg or MultiBitConfig())

    @classmethod
    def from_linear(cls, linear: nn.Linear, cfg: MultiBitConfig) -> QLinear:
        """A QLinear sharing ``linear``'s parameters (no copy)."""
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.__dict__.update(_shallow_state(linear))
        new.training = linear.training
        new._setup(cfg)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.effective_weight(), self.bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, {self._extra()}"


class QAct(_MultiBit, nn.Module):
    """The multi-bit activation: ``relu`` at 32 bits, ``clamp(0, 1)`` and rounding below."""

    def __init__(self) -> None:
        super().__init__()
        self.bits = FULL_PRECISION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return quantize_activation(x, self.bits)

    def extra_repr(self) -> str:
        return f"bits={self.bits}"


class SwitchableBatchNorm2d(_MultiBit, nn.Module):
    """One ``BatchNorm2d`` (statistics and affine) per bit-width: Any-Precision's switchable BN.

    Args:
        num_features: channels C of the (N, C, H, W) input.
        bits: the bit-widths that own a BatchNorm.
        **kwargs: passed to every ``nn.BatchNorm2d``.

    A forward at a bit-width without its own BatchNorm raises ``KeyError``; Any-Precision
    serves such a bit-width only after :func:`recalibrate_bn`.
    """

    def __init__(self, num_features: int, bits: Iterable[int], **kwargs: Any) -> None:
        super().__init__()
        bits = tuple(check_bits(b, "bits") for b in bits)
        if not bits:
            raise ValueError("bits: expected at least one bit-width")
        self.num_features = num_features
        self.bits = max(bits)
        self.bn = nn.ModuleDict({str(b): nn.BatchNorm2d(num_features, **kwargs) for b in bits})

    @classmethod
    def from_batchnorm(cls, bn: nn.BatchNorm2d, bits: Iterable[int]) -> SwitchableBatchNorm2d:
        """One copy of ``bn`` (parameters and statistics) per bit-width."""
        new = cls(
            bn.num_features,
            bits,
            eps=bn.eps,
            momentum=bn.momentum,
            affine=bn.affine,
            track_running_stats=bn.track_running_stats,
        )
        like = [t for t in (*bn.parameters(), *bn.buffers()) if t.is_floating_point()]
        if like:
            new.to(device=like[0].device, dtype=like[0].dtype)
        for child in new.bn.values():
            child.load_state_dict(bn.state_dict())
        new.train(bn.training)
        return new

    def add_bits(self, bits: int) -> nn.BatchNorm2d:
        """The BatchNorm of ``bits``, created from the nearest existing one if absent."""
        bits = check_bits(bits)
        key = str(bits)
        if key not in self.bn:
            nearest = min(self.trained_bits, key=lambda b: (abs(b - bits), -b))
            self.bn[key] = copy.deepcopy(self.bn[str(nearest)])
        return self.bn[key]

    @property
    def trained_bits(self) -> tuple[int, ...]:
        return tuple(int(b) for b in self.bn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = str(self.bits)
        if key not in self.bn:
            raise KeyError(
                f"SwitchableBatchNorm2d has no BatchNorm for {self.bits} bits (it has "
                f"{self.trained_bits}): calibrate one with recalibrate_bn(model, bits, loader)"
            )
        return self.bn[key](x)

    def extra_repr(self) -> str:
        return f"{self.num_features}, bits={self.bits}, trained_bits={self.trained_bits}"


def multibit_modules(model: nn.Module) -> list[nn.Module]:
    """Every module of ``model`` whose behaviour depends on the current bit-width."""
    return [m for m in model.modules() if isinstance(m, _MultiBit)]


def _check_model(model: Any) -> list[nn.Module]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    mods = multibit_modules(model)
    if not mods:
        raise ValueError("model: has no multi-bit layers; convert it with convert_(model, cfg)")
    return mods


def current_bits(model: nn.Module) -> int:
    """The bit-width ``model`` currently runs at."""
    mods = _check_model(model)
    bits = {m.bits for m in mods}
    if len(bits) != 1:
        raise ValueError(f"model: layers disagree on the bit-width ({sorted(bits)}); use set_bits")
    return bits.pop()


def set_bits(model: nn.Module, bits: int) -> nn.Module:
    """Run every multi-bit layer of ``model`` at ``bits`` from now on; returns ``model``."""
    mods = _check_model(model)
    bits = check_bits(bits)
    for m in mods:
        m.bits = bits
    return model


@contextlib.contextmanager
def using_bits(model: nn.Module, bits: int) -> Iterator[nn.Module]:
    """Context manager: run ``model`` at ``bits`` inside the block, restore the previous after.

    Any bit-width in 1–8 or 32 works with a shared-BN model, trained or not.

    Example:
        >>> model = convert_(resnet_multibit(depth=8, in_channels=1, width=4), MultiBitConfig())
        >>> with using_bits(model.eval(), 3):
        ...     model(torch.randn(2, 1, 8, 8)).shape
        torch.Size([2, 10])
    """
    mods = _check_model(model)
    bits = check_bits(bits)
    previous = [m.bits for m in mods]
    for m in mods:
        m.bits = bits
    try:
        yield model
    finally:
        for m, b in zip(mods, previous, strict=True):
            m.bits = b


def _on_skip_path(name: str) -> bool:
    return any(part in SKIP_NAMES for part in name.split("."))


def quantized_layers(model: nn.Module) -> dict[str, nn.Module]:
    """The float layers :func:`convert_` replaces, by name: every ``nn.Conv2d``, ``nn.Linear``,
    ``nn.ReLU`` and (for switchable BN) ``nn.BatchNorm2d``, except the first conv (in registration
    order), the classifier (the last ``nn.Linear``) and the skip path (a name component in
    :data:`SKIP_NAMES`). A peer's QAT model (:mod:`multibitq.peers`) quantizes the same layers."""
    named = list(model.named_modules())
    convs = [n for n, m in named if type(m) is nn.Conv2d]
    linears = [n for n, m in named if type(m) is nn.Linear]
    keep = {n for n, _ in named if _on_skip_path(n)}
    keep.update(convs[:1])
    keep.update(linears[-1:])
    kinds = (nn.Conv2d, nn.Linear, nn.ReLU, nn.BatchNorm2d)
    return {n: m for n, m in named if n and n not in keep and type(m) in kinds}


def convert_(model: nn.Module, cfg: MultiBitConfig) -> nn.Module:
    """Make ``model`` multi-bit in place and return it.

    Swaps every ``nn.Conv2d`` for :class:`QConv2d`, every ``nn.Linear`` for :class:`QLinear` and
    every ``nn.ReLU`` for :class:`QAct`, except the first conv (in registration order), the
    classifier (the last ``nn.Linear``) and the skip-path modules (a name component in
    :data:`SKIP_NAMES`), which stay full precision. With ``cfg.bn="switchable"`` every
    ``nn.BatchNorm2d`` off the skip path becomes a :class:`SwitchableBatchNorm2d` (the skip BN stays
    plain, as in Any-Precision). Parameters are shared, not copied; the model starts at the
    largest bit-width of ``cfg.bits``.

    Raises:
        TypeError: ``model`` is not an ``nn.Module`` or ``cfg`` not a :class:`MultiBitConfig`.
        ValueError: ``model`` is already converted, or has no layer to quantize.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    if not isinstance(cfg, MultiBitConfig):
        raise TypeError(f"cfg: expected a MultiBitConfig, got {type(cfg).__name__}")
    if multibit_modules(model):
        raise ValueError("model: is already multi-bit (convert_ was called on it before)")
    replacements: dict[str, nn.Module] = {}
    for name, m in quantized_layers(model).items():
        if type(m) is nn.Conv2d:
            replacements[name] = QConv2d.from_conv(m, cfg)
        elif type(m) is nn.Linear:
            replacements[name] = QLinear.from_linear(m, cfg)
        elif type(m) is nn.ReLU:
            replacements[name] = QAct().train(m.training)
        elif type(m) is nn.BatchNorm2d and cfg.bn == "switchable":
            replacements[name] = SwitchableBatchNorm2d.from_batchnorm(m, cfg.bits)
    if not any(isinstance(r, _QuantizedWeight) for r in replacements.values()):
        raise ValueError(
            "model: has no Conv2d or Linear to quantize besides the first conv, the classifier "
            "and the skip path"
        )
    for name, new in replacements.items():
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name), attr, new)
    set_bits(model, max(cfg.bits))
    return model


class PreActBlock(nn.Module):
    """Any-Precision's pre-activation basic block: BN → act → conv → BN → act → conv (+ skip).

    The skip path (1×1 conv + BN, only where the stride is 2) takes the pre-activated input.
    """

    def __init__(self, in_planes: int, out_planes: int, stride: int) -> None:
        super().__init__()
        self.bn0 = nn.BatchNorm2d(in_planes)
        self.act0 = nn.ReLU()
        self.conv0 = nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_planes)
        self.act1 = nn.ReLU()
        self.conv1 = nn.Conv2d(out_planes, out_planes, 3, padding=1, bias=False)
        self.skip_conv = self.skip_bn = None
        if stride != 1 or in_planes != out_planes:
            self.skip_conv = nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False)
            self.skip_bn = nn.BatchNorm2d(out_planes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act0(self.bn0(x))
        shortcut = x if self.skip_conv is None else self.skip_bn(self.skip_conv(out))
        out = self.conv1(self.act1(self.bn1(self.conv0(out))))
        return out + shortcut


class PreActResNet(nn.Module):
    """The CIFAR PreAct ResNet of Any-Precision: conv → blocks → BN → global mean → FC.

    As in the official ``resnet_quan.py``, there is no activation between the last BN and the
    pooling.
    """

    def __init__(
        self, blocks_per_stage: int, in_channels: int, num_classes: int, width: int
    ) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(in_channels, width, 3, padding=1, bias=False)
        layers, in_planes = [], width
        for stage in range(3):
            planes = width * 2**stage
            for i in range(blocks_per_stage):
                stride = 2 if stage > 0 and i == 0 else 1
                layers.append(PreActBlock(in_planes, planes, stride))
                in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.bn = nn.BatchNorm2d(in_planes)
        self.fc = nn.Linear(in_planes, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The pooled features (N, 4·width) that feed the classifier."""
        return self.bn(self.layers(self.conv0(x))).mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


def resnet_multibit(
    depth: int = 20, in_channels: int = 3, num_classes: int = 10, width: int = 16
) -> PreActResNet:
    """The float PreAct ResNet of Any-Precision (depth 6n + 2, widths w/2w/4w); pass it to convert_.

    ``depth=20, width=80`` is Any-Precision's ResNet-20 (expand 5); ``depth=8, width=16`` is the
    ≈77K-parameter model of the reduced reproduction.

    Example:
        >>> model = resnet_multibit(depth=8, in_channels=1, num_classes=10, width=16)
        >>> sum(p.numel() for p in model.parameters())
        77754
    """
    for name, value in (
        ("depth", depth),
        ("in_channels", in_channels),
        ("num_classes", num_classes),
        ("width", width),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value}")
    if depth < 8 or (depth - 2) % 6:
        raise ValueError(f"depth: expected 6n + 2 with n >= 1 (8, 14, 20, ...), got {depth}")
    return PreActResNet((depth - 2) // 6, in_channels, num_classes, width)
