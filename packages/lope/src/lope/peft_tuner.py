"""LoPE registered as a peft method: ``peft.get_peft_model(model, LoPEPeftConfig(...))``.

Importing this module (it needs peft, the ``peers`` extra) registers the method ``"lope"`` with
peft 0.21's ``register_peft_method``. That function only accepts names that already are members
of peft's closed ``PeftType`` enum (every built-in method adds its own line to peft's source), so
this module first adds the member ``PeftType.LOPE`` to the enum's maps: the one place where lope
reaches into peft's internals. After that peft's own machinery runs unchanged:
``get_peft_model``, ``PeftModel.save_pretrained`` / ``PeftModel.from_pretrained``
(``adapter_config.json`` with ``"peft_type": "LOPE"`` + ``adapter_model.safetensors``),
``print_trainable_parameters``, ``disable_adapter``.

The adapter tensors live in per-adapter ``ParameterDict``s under the prefix ``lope_`` (``lope_A``
``[r, in]``, ``lope_B`` ``[N, out, r]``, ``lope_router``), peft's layout; the maths is
``lope.ops`` (the same calls as :class:`lope.layer.AsymmetricLoRALinear`). Stages:
:func:`set_stage`. Merging raises (a token-dependent mixture cannot be merged into ``W0``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import torch
from peft import PeftConfig
from peft.tuners.tuners_utils import BaseTuner, BaseTunerLayer
from peft.utils import PeftType, register_peft_method
from torch import nn

from . import ops
from .config import LoPEConfig
from .layer import MODES

__all__ = ["PEFT_TYPE", "LoPEPeftConfig", "LoPEPeftLayer", "LoPETuner", "set_stage"]


def _add_peft_type(name: str = "LOPE") -> PeftType:
    """Add ``name`` to peft's ``PeftType`` enum (idempotent) and return the member."""
    if name in PeftType.__members__:
        return PeftType[name]
    member = str.__new__(PeftType, name)
    member._name_ = name
    member._value_ = name
    member._sort_order_ = len(PeftType._member_names_)
    type.__setattr__(PeftType, name, member)
    PeftType._member_map_[name] = member
    PeftType._value2member_map_[name] = member
    PeftType._member_names_.append(name)
    return member


PEFT_TYPE = _add_peft_type()


@dataclasses.dataclass
class LoPEPeftConfig(PeftConfig):
    """:class:`lope.LoPEConfig`'s fields as a peft ``PeftConfig`` (validated by ``LoPEConfig``)."""

    r: int = 4
    lora_alpha: float = 32
    lora_dropout: float = 0.05
    target_modules: list[str] | str | None = dataclasses.field(
        default_factory=lambda: ["gate_proj", "up_proj", "down_proj"]
    )
    num_experts: int = 4
    poison_experts: list[int] = dataclasses.field(default_factory=lambda: [3])
    router_input: str = "x"
    compensation_k: int | None = None
    compensation_beta: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        self.peft_type = PEFT_TYPE
        if isinstance(self.poison_experts, int) and not isinstance(self.poison_experts, bool):
            self.poison_experts = [self.poison_experts]
        self.poison_experts = list(self.poison_experts)
        self.lope_config()  # raises ValueError/TypeError naming the argument

    def lope_config(self) -> LoPEConfig:
        """The same settings as a :class:`lope.LoPEConfig`."""
        return LoPEConfig(
            r=self.r,
            lora_alpha=self.lora_alpha,
            lora_dropout=self.lora_dropout,
            target_modules=self.target_modules,
            num_experts=self.num_experts,
            poison_experts=tuple(self.poison_experts),
            router_input=self.router_input,
            compensation_k=self.compensation_k,
            compensation_beta=self.compensation_beta,
        )


class LoPEPeftLayer(nn.Module, BaseTunerLayer):
    """An ``nn.Linear`` with LoPE adapters in peft's per-adapter layout."""

    adapter_layer_names = ("lope_A", "lope_B", "lope_router")
    other_param_names = ("lope_settings",)

    def __init__(self, base_layer: nn.Linear, adapter_name: str, config: LoPEPeftConfig) -> None:
        nn.Module.__init__(self)
        if not isinstance(base_layer, nn.Linear):
            raise TypeError(f"base_layer: expected an nn.Linear, got {type(base_layer).__name__}")
        self.base_layer = base_layer
        self.lope_A = nn.ParameterDict()
        self.lope_B = nn.ParameterDict()
        self.lope_router = nn.ParameterDict()
        self.lope_dropout = nn.ModuleDict()
        self.lope_settings: dict[str, dict] = {}
        self.lope_mode = "inference"
        self._disable_adapters = False
        self.merged_adapters: list[str] = []
        self._active_adapter = adapter_name
        self.update_layer(adapter_name, config)

    def update_layer(self, adapter_name: str, config: LoPEPeftConfig) -> None:
        cfg = config.lope_config()
        w = self.base_layer.weight
        kw = dict(dtype=w.dtype, device=w.device)
        A = torch.empty(cfg.r, self.base_layer.in_features, **kw)
        width = self.base_layer.in_features if cfg.router_input == "x" else cfg.r
        router = torch.empty(cfg.num_experts, width, **kw)
        nn.init.kaiming_uniform_(A, a=math.sqrt(5))  # as AsymmetricLoRALinear / HydraLoRA
        nn.init.kaiming_uniform_(router, a=math.sqrt(5))
        self.lope_A[adapter_name] = nn.Parameter(A)
        self.lope_B[adapter_name] = nn.Parameter(
            torch.zeros(cfg.num_experts, self.base_layer.out_features, cfg.r, **kw)
        )
        self.lope_router[adapter_name] = nn.Parameter(router)
        self.lope_dropout[adapter_name] = (
            nn.Dropout(cfg.lora_dropout) if cfg.lora_dropout > 0 else nn.Identity()
        )
        self.lope_settings[adapter_name] = dict(
            scaling=cfg.scaling,
            poison=tuple(cfg.poison_experts),
            router_input=cfg.router_input,
            k=cfg.compensation_k,
            beta=cfg.compensation_beta,
            trainable=None,
        )
        self.set_adapter(self.active_adapters)

    def merge(self, *args, **kwargs) -> None:
        raise NotImplementedError(
            "LoPE adapters cannot be merged: the expert mixture depends on each token"
        )

    def unmerge(self) -> None:
        raise NotImplementedError("LoPE adapters are never merged")

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        result = self.base_layer(x, *args, **kwargs)
        if self.disable_adapters:
            return result
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        for name in self.active_adapters:
            if name not in self.lope_A:
                continue
            s = self.lope_settings[name]
            h = self.lope_dropout[name](flat) @ self.lope_A[name].T
            gates = ops.route(flat if s["router_input"] == "x" else h, self.lope_router[name])
            B = self.lope_B[name]
            rows = s["trainable"]
            if rows is not None and B.requires_grad:
                B = torch.where(rows.to(B.device)[:, None, None], B, B.detach())
            if self.lope_mode == "inference" and s["poison"]:
                expert_out = torch.einsum("tr,nor->tno", h, B)
                gates = ops.compensate(gates, expert_out, s["poison"], s["k"], s["beta"])
            delta = ops.expert_mix(h, gates, B, s["scaling"])
            result = result + delta.reshape(*shape[:-1], -1).to(result.dtype)
        return result


class LoPETuner(BaseTuner):
    """peft's tuner for LoPE (``PeftType.LOPE``, prefix ``lope_``)."""

    prefix = "lope_"
    tuner_layer_cls = LoPEPeftLayer
    target_module_mapping: ClassVar[dict[str, list[str]]] = {
        "llama": ["gate_proj", "up_proj", "down_proj"]
    }

    def _create_and_replace(
        self, peft_config, adapter_name, target, target_name, parent, current_key=None, **kwargs
    ) -> None:
        if isinstance(target, LoPEPeftLayer):
            target.update_layer(adapter_name, peft_config)
            return
        if not isinstance(target, nn.Linear):
            raise TypeError(
                f"target_modules: LoPE adapts nn.Linear only, {current_key!r} is a "
                f"{type(target).__name__}"
            )
        new = LoPEPeftLayer(target, adapter_name, peft_config)
        if adapter_name not in self.active_adapters:
            new.requires_grad_(False)
        self._replace_module(parent, target_name, new, target)

    def _check_merge_allowed(self) -> None:
        raise NotImplementedError(
            "LoPE adapters cannot be merged: the expert mixture depends on each token"
        )


def set_stage(model: nn.Module, stage: str, adapter_name: str = "default") -> list[nn.Parameter]:
    """Set the LoPE stage of every layer of a peft model; return the parameters that train.

    ``stage1``: ``A`` and the poisoning rows of ``B``; ``stage2``: ``A``, the normal rows of ``B``
    and the router; ``inference``: nothing trains, the poisoning experts are masked and
    compensated; ``all``: everything trains, every expert mixes (HydraLoRA).
    """
    if stage not in MODES:
        raise ValueError(f"stage: expected one of {MODES}, got {stage!r}")
    layers = [m for m in model.modules() if isinstance(m, LoPEPeftLayer)]
    if not layers:
        raise ValueError("model: has no LoPE peft layers")
    params: list[nn.Parameter] = []
    for layer in layers:
        if adapter_name not in layer.lope_A:
            raise ValueError(f"adapter_name: {adapter_name!r} is not an adapter of this model")
        s = layer.lope_settings[adapter_name]
        if stage in ("stage1", "stage2") and not s["poison"]:
            raise ValueError(f"stage: {stage!r} needs a poisoning expert; this adapter has none")
        n = layer.lope_B[adapter_name].shape[0]
        is_poison = torch.zeros(n, dtype=torch.bool)
        is_poison[list(s["poison"])] = True
        s["trainable"] = {"stage1": is_poison, "stage2": ~is_poison}.get(stage)
        flags = {
            "stage1": (True, True, False),
            "stage2": (True, True, True),
            "inference": (False, False, False),
            "all": (True, True, True),
        }[stage]
        tensors = (
            layer.lope_A[adapter_name],
            layer.lope_B[adapter_name],
            layer.lope_router[adapter_name],
        )
        for p, flag in zip(tensors, flags):
            p.requires_grad_(flag)
            if flag:
                params.append(p)
        layer.lope_mode = stage
    return params


if PEFT_TYPE not in __import__("peft").mapping.PEFT_TYPE_TO_CONFIG_MAPPING:
    register_peft_method(
        name="lope", config_cls=LoPEPeftConfig, model_cls=LoPETuner, prefix="lope_"
    )
