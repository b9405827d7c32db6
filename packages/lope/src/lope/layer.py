"""``AsymmetricLoRALinear``: an ``nn.Linear`` with HydraLoRA's mixture and LoPE's poisoning experts."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from . import ops

__all__ = ["MODES", "AsymmetricLoRALinear"]

MODES = ops.MODES


class AsymmetricLoRALinear(nn.Module):
    """``y = W0 x + b + (α/r)·Σ_i ω̃_i B_i A dropout(x)``, with ``ω = softmax(W_g x)`` in fp32.

    Parameters (dtype and device of the base weight): ``lora_A [r, in]`` and ``router [N, in]``
    (``[N, r]`` with ``router_input="lowrank"``), Kaiming-uniform with ``a=√5`` as in HydraLoRA,
    and ``lora_B [N, out, r]``, zero, so a fresh layer adds exactly zero. The base is frozen.

    ``mode`` (set by ``set_mode``; ``LoPEModel.set_stage`` sets it on every layer):

    - ``"stage1"``: A and the poisoning rows of B train; the normal rows of B get zero gradient
      (they enter the forward detached), the router is frozen; every expert is mixed.
    - ``"stage2"``: A, the normal rows of B and the router train; the poisoning rows stay in the
      forward pass, detached.
    - ``"inference"``: nothing trains; the poisoning experts are masked and compensated.
    - ``"all"``: everything trains, every expert is mixed (HydraLoRA).

    Use a fresh optimizer per stage (``set_stage`` returns its parameters): rows that get zero
    gradient then stay exactly where they are.

    Args:
        base: the ``nn.Linear`` to adapt (kept as ``base_layer``, frozen).
        rank: r.
        num_experts: N.
        poison: indices of the poisoning experts.
        alpha: ``lora_alpha``; the scaling is ``alpha / rank``.
        dropout: dropout probability on the input of A.
        router_input: ``"x"`` or ``"lowrank"``.
        compensation_k: compensating experts at inference (``None``: all normal experts).
        compensation_beta: compensation strength.

    Example:
        >>> layer = AsymmetricLoRALinear(nn.Linear(6, 5), rank=2, num_experts=4, poison=(3,))
        >>> x = torch.randn(3, 6)
        >>> torch.equal(layer(x), layer.base_layer(x))
        True
    """

    def __init__(
        self,
        base: nn.Linear,
        rank: int = 4,
        num_experts: int = 4,
        poison: Sequence[int] | int = (3,),
        alpha: float = 32,
        dropout: float = 0.0,
        router_input: str = "x",
        compensation_k: int | None = None,
        compensation_beta: float = 1.0,
    ) -> None:
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"base: expected an nn.Linear, got {type(base).__name__}")
        for name, value in (("rank", rank), ("num_experts", num_experts)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
            if value < 1:
                raise ValueError(f"{name}: expected >= 1, got {value}")
        if isinstance(poison, int) and not isinstance(poison, bool):
            poison = (poison,)
        if poison and num_experts < 2:
            raise ValueError(
                f"num_experts: a poisoning expert needs at least 2 experts, got {num_experts}"
            )
        poison = ops._check_poison(poison, num_experts)
        compensation_k, compensation_beta = ops._check_compensation(
            compensation_k, compensation_beta, num_experts - len(poison)
        )
        if router_input not in ops.ROUTER_INPUTS:
            raise ValueError(
                f"router_input: expected one of {ops.ROUTER_INPUTS}, got {router_input!r}"
            )
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise TypeError(f"alpha: expected a real number, got {type(alpha).__name__}")
        if not math.isfinite(alpha):
            raise ValueError(f"alpha: expected a finite number, got {alpha}")
        if (
            isinstance(dropout, bool)
            or not isinstance(dropout, (int, float))
            or not 0 <= dropout < 1
        ):
            raise ValueError(f"dropout: expected a probability in [0, 1), got {dropout!r}")
        self.base_layer = base
        base.requires_grad_(False)
        self.rank, self.num_experts, self.poison = rank, num_experts, poison
        self.scaling = alpha / rank
        self.router_input = router_input
        self.compensation_k, self.compensation_beta = compensation_k, compensation_beta
        w = base.weight
        kw = dict(dtype=w.dtype, device=w.device)
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, **kw))
        self.lora_B = nn.Parameter(torch.zeros(num_experts, base.out_features, rank, **kw))
        width = base.in_features if router_input == "x" else rank
        self.router = nn.Parameter(torch.empty(num_experts, width, **kw))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        nn.init.kaiming_uniform_(self.router, a=math.sqrt(5))
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.register_buffer(
            "_b_trainable", torch.ones(num_experts, dtype=torch.bool, device=w.device), False
        )
        self.mode = "all"
        self.set_mode("all")

    def set_mode(self, mode: str) -> list[nn.Parameter]:
        """Set the forward mode and ``requires_grad``; return the parameters that train."""
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
        if mode in ("stage1", "stage2") and not self.poison:
            raise ValueError(f"mode: {mode!r} needs a poisoning expert; this layer has none")
        is_poison = torch.zeros(self.num_experts, dtype=torch.bool, device=self._b_trainable.device)
        is_poison[list(self.poison)] = True
        rows = {"stage1": is_poison, "stage2": ~is_poison, "inference": None, "all": None}[mode]
        self._b_trainable.copy_(
            rows if rows is not None else torch.full_like(is_poison, mode == "all")
        )
        trains = {
            "stage1": (True, True, False),
            "stage2": (True, True, True),
            "inference": (False, False, False),
            "all": (True, True, True),
        }[mode]
        for p, flag in zip((self.lora_A, self.lora_B, self.router), trains):
            p.requires_grad_(flag)
        self.mode = mode
        return [p for p in (self.lora_A, self.lora_B, self.router) if p.requires_grad]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = self.base_layer(x)
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        h = self.dropout(flat) @ self.lora_A.T
        gates = ops.route(flat if self.router_input == "x" else h, self.router)
        B = self.lora_B
        if B.requires_grad and not bool(self._b_trainable.all()):
            B = torch.where(self._b_trainable[:, None, None], B, B.detach())
        if self.mode == "inference" and self.poison:
            expert_out = torch.einsum("tr,nor->tno", h, B)
            gates = ops.compensate(
                gates, expert_out, self.poison, self.compensation_k, self.compensation_beta
            )
        delta = ops.expert_mix(h, gates, B, self.scaling)
        return base + delta.reshape(*shape[:-1], -1).to(base.dtype)

    def extra_repr(self) -> str:
        return (
            f"rank={self.rank}, num_experts={self.num_experts}, poison={self.poison}, "
            f"router_input={self.router_input!r}, mode={self.mode!r}"
        )
