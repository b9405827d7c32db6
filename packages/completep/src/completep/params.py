"""Table 1 of the paper: how init, forward multipliers and per-group AdamW hyperparameters scale.

``m_N = width / base_width`` (hidden size) and ``m_L = depth / base_depth`` (decoder blocks). Every
scalar below is a pure function of the configuration and the shape, so it can be checked against the
formulas without building a model.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

__all__ = ["GROUPS", "GroupScale", "Multipliers", "ParamConfig", "multipliers"]

KINDS = ("sp", "mup", "depth_mup", "completep")
DEFAULT_ALPHA = {"sp": 0.0, "mup": 0.0, "depth_mup": 0.5, "completep": 1.0}
#: The parameter groups of Table 1, in the order :func:`completep.param_groups` emits them.
GROUPS = (
    "embedding",
    "block_norm",
    "hidden_weight",
    "hidden_bias",
    "final_norm",
    "unembedding",
)


def _positive_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class ParamConfig:
    """A parameterization: which of SP, μP, depth-μP (α = 0.5) or CompleteP (α = 1), and its base.

    Args:
        kind: ``"sp"``, ``"mup"`` (width only), ``"depth_mup"`` (α = 0.5) or ``"completep"`` (α = 1).
        base_width: hidden size the base hyperparameters were tuned at (``m_N = N / base_width``).
        base_depth: number of decoder blocks of the base model (``m_L = L / base_depth``).
        sigma_base: base init standard deviation σ.
        input_alpha: α_in, the embedding output multiplier (μP family only).
        output_alpha: α_out; the logits are multiplied by α_out / m_N (μP family only).
        alpha: the depth exponent; overrides the kind's default (0, 0, 0.5, 1). Must be in [0, 1].
        eps_scope: ``"blocks"`` (Table 1: only in-block groups get ε·m_N⁻¹·m_L⁻ᵅ) or ``"global"``
            (the official code: every group, embeddings and final norm included).
        wd_width_scaling: hidden-weight decay λ·m_N (Table 1, for PyTorch's coupled AdamW decay);
            False leaves it λ (the official code's width-only μP branch).

    >>> ParamConfig(kind="completep").resolved_alpha
    1.0
    """

    kind: str = "completep"
    base_width: int = 64
    base_depth: int = 2
    sigma_base: float = 0.02
    input_alpha: float = 1.0
    output_alpha: float = 1.0
    alpha: float | None = None
    eps_scope: str = "blocks"
    wd_width_scaling: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS}, got {self.kind!r}")
        for name in ("base_width", "base_depth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
            if value <= 0:
                raise ValueError(f"{name}: expected an int > 0, got {value}")
        _positive_number("sigma_base", self.sigma_base)
        _positive_number("input_alpha", self.input_alpha)
        _positive_number("output_alpha", self.output_alpha)
        if self.alpha is not None:
            if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)):
                raise TypeError(
                    f"alpha: expected a number or None, got {type(self.alpha).__name__}"
                )
            if not (0.0 <= self.alpha <= 1.0):
                raise ValueError(f"alpha: expected a value in [0, 1], got {self.alpha!r}")
            if self.kind == "sp":
                raise ValueError("alpha: kind='sp' has no depth exponent; use a μP-family kind")
            if self.alpha < 0.5:
                warnings.warn(
                    f"alpha={self.alpha} < 0.5: the residual stream's update grows with depth "
                    "(the paper's analysis needs alpha in [0.5, 1])",
                    stacklevel=3,
                )
        if self.eps_scope not in ("blocks", "global"):
            raise ValueError(f"eps_scope: expected 'blocks' or 'global', got {self.eps_scope!r}")
        if not isinstance(self.wd_width_scaling, bool):
            raise TypeError(
                f"wd_width_scaling: expected a bool, got {type(self.wd_width_scaling).__name__}"
            )

    @property
    def resolved_alpha(self) -> float:
        """α: the override if given, else 0 (SP, μP), 0.5 (depth-μP) or 1 (CompleteP)."""
        return float(self.alpha) if self.alpha is not None else DEFAULT_ALPHA[self.kind]


@dataclasses.dataclass(frozen=True)
class GroupScale:
    """Factors of one Table 1 group relative to the base HPs: lr = η·lr, wd = λ·wd, ε = ε·eps."""

    lr: float
    weight_decay: float
    eps: float
    init_std: float | None  # None: ones (norm gains) or zeros (biases), not random


@dataclasses.dataclass(frozen=True)
class Multipliers:
    """Every Table 1 scalar at one shape (see :func:`multipliers`)."""

    width_ratio: float  # m_N
    depth_ratio: float  # m_L
    alpha: float
    residual: float  # m_L^-α, multiplies each attention and MLP branch output
    embedding: float  # α_in, multiplies the embedding output
    logits: float  # α_out / m_N, multiplies the lm_head input (= the logits)
    attention_power: float  # attention scale is head_dim ** -attention_power (0.5 SP, 1 μP)
    groups: dict[str, GroupScale]

    def attention_scale(self, head_dim: int) -> float:
        return float(head_dim) ** -self.attention_power


def multipliers(cfg: ParamConfig, width: int, depth: int) -> Multipliers:
    """Every Table 1 scalar for a model of hidden size ``width`` and ``depth`` decoder blocks.

    Args:
        cfg: the parameterization.
        width: hidden size N (> 0).
        depth: number of decoder blocks L (> 0).

    Returns:
        A :class:`Multipliers`; its ``groups`` map each of :data:`GROUPS` to a :class:`GroupScale`.

    >>> m = multipliers(ParamConfig(kind="completep", base_width=64, base_depth=2), 256, 16)
    >>> m.residual, m.groups["hidden_weight"].lr, m.groups["hidden_weight"].eps
    (0.125, 0.25, 0.03125)
    """
    if not isinstance(cfg, ParamConfig):
        raise TypeError(f"cfg: expected a ParamConfig, got {type(cfg).__name__}")
    for name, value in (("width", width), ("depth", depth)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
        if value <= 0:
            raise ValueError(f"{name}: expected an int > 0, got {value}")
    sigma = cfg.sigma_base
    if cfg.kind == "sp":
        one = GroupScale(1.0, 1.0, 1.0, sigma)
        groups = {
            "embedding": one,
            "block_norm": GroupScale(1.0, 0.0, 1.0, None),
            "hidden_weight": one,
            "hidden_bias": GroupScale(1.0, 0.0, 1.0, None),
            "final_norm": GroupScale(1.0, 0.0, 1.0, None),
            "unembedding": one,
        }
        return Multipliers(
            width_ratio=width / cfg.base_width,
            depth_ratio=depth / cfg.base_depth,
            alpha=0.0,
            residual=1.0,
            embedding=1.0,
            logits=1.0,
            attention_power=0.5,
            groups=groups,
        )
    m_n = width / cfg.base_width
    m_l = depth / cfg.base_depth
    alpha = cfg.resolved_alpha
    if cfg.kind == "mup" and cfg.alpha is None:
        # μP is Table 1 without its depth factors (not α = 0, which would leave m_L^-1 on the LR).
        depth_lr, depth_eps = 1.0, 1.0
    else:
        depth_lr, depth_eps = m_l ** (alpha - 1.0), m_l**-alpha
    block_eps = 1.0 / m_n * depth_eps
    outer_eps = block_eps if cfg.eps_scope == "global" else 1.0
    groups = {
        "embedding": GroupScale(1.0, 1.0, outer_eps, sigma),
        "block_norm": GroupScale(depth_lr, 0.0, block_eps, None),
        "hidden_weight": GroupScale(
            depth_lr / m_n, m_n if cfg.wd_width_scaling else 1.0, block_eps, sigma / math.sqrt(m_n)
        ),
        "hidden_bias": GroupScale(depth_lr, 0.0, block_eps, None),
        "final_norm": GroupScale(1.0, 0.0, outer_eps, None),
        "unembedding": GroupScale(1.0, 1.0, outer_eps, sigma),
    }
    return Multipliers(
        width_ratio=m_n,
        depth_ratio=m_l,
        alpha=alpha,
        residual=m_l**-alpha,
        embedding=cfg.input_alpha,
        logits=cfg.output_alpha / m_n,
        attention_power=1.0,
        groups=groups,
    )
