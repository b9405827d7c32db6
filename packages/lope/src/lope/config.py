"""``LoPEConfig`` and ``HydraLoRAConfig``: saved as ``adapter_config.json`` like a peft config."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field

__all__ = ["CONFIG_NAME", "HydraLoRAConfig", "LoPEConfig"]

CONFIG_NAME = "adapter_config.json"
ROUTER_INPUTS = ("x", "lowrank")
PEFT_TYPES = ("LOPE", "HYDRALORA")


@dataclass
class LoPEConfig:
    """Settings of a LoPE adapter (HydraLoRA's asymmetric mixture with poisoning experts).

    Args:
        r: rank of the shared ``A`` ``[r, in]``.
        lora_alpha: the scaling is ``lora_alpha / r``.
        lora_dropout: dropout on the input of ``A`` (not on the router input).
        target_modules: names of the ``nn.Linear`` modules to adapt: a list matches the last
            component of a module's name (peft's rule), a string is a regex matched in full.
        num_experts: N, the number of up-projections ``B_i``.
        poison_experts: indices of the poisoning experts (empty: HydraLoRA).
        router_input: ``"x"`` (HydraLoRA's code) or ``"lowrank"`` (route on ``h = A x``).
        compensation_k: compensating experts at inference (``None``: all normal experts).
        compensation_beta: compensation strength ``β ≥ 0``.

    Example:
        >>> LoPEConfig().scaling
        8.0
    """

    r: int = 4
    lora_alpha: float = 32
    lora_dropout: float = 0.05
    target_modules: list[str] | str = field(
        default_factory=lambda: ["gate_proj", "up_proj", "down_proj"]
    )
    num_experts: int = 4
    poison_experts: tuple[int, ...] = (3,)
    router_input: str = "x"
    compensation_k: int | None = None
    compensation_beta: float = 1.0
    peft_type: str = "LOPE"

    def __post_init__(self) -> None:
        for name in ("r", "num_experts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
            if value < 1:
                raise ValueError(f"{name}: expected >= 1, got {value}")
        for name in ("lora_alpha", "lora_dropout", "compensation_beta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name}: expected a real number, got {type(value).__name__}")
            if not math.isfinite(value):
                raise ValueError(f"{name}: expected a finite number, got {value}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"lora_dropout: expected 0 <= p < 1, got {self.lora_dropout}")
        if self.compensation_beta < 0:
            raise ValueError(f"compensation_beta: expected >= 0, got {self.compensation_beta}")
        if isinstance(self.target_modules, str):
            if not self.target_modules:
                raise ValueError("target_modules: expected a non-empty regex or list of names")
        elif isinstance(self.target_modules, (list, tuple)) and all(
            isinstance(t, str) for t in self.target_modules
        ):
            if not self.target_modules:
                raise ValueError("target_modules: expected at least one module name")
            self.target_modules = list(self.target_modules)
        else:
            raise TypeError(
                "target_modules: expected a regex string or a list of module names, "
                f"got {self.target_modules!r}"
            )
        poison = self.poison_experts
        if isinstance(poison, int) and not isinstance(poison, bool):
            poison = (poison,)
        if not isinstance(poison, (list, tuple)) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in poison
        ):
            raise TypeError(f"poison_experts: expected a tuple of ints, got {poison!r}")
        poison = tuple(sorted(poison))
        if poison and self.num_experts < 2:
            raise ValueError(
                f"num_experts: a poisoning expert needs at least 2 experts, got {self.num_experts}"
            )
        for d in poison:
            if not 0 <= d < self.num_experts:
                raise ValueError(
                    f"poison_experts: index {d} out of range for num_experts={self.num_experts}"
                )
        if len(set(poison)) != len(poison):
            raise ValueError(f"poison_experts: an index is given twice in {poison}")
        if poison and len(poison) >= self.num_experts:
            raise ValueError(f"poison_experts: {poison} leaves no normal expert")
        self.poison_experts = poison
        if self.router_input not in ROUTER_INPUTS:
            raise ValueError(
                f"router_input: expected one of {ROUTER_INPUTS}, got {self.router_input!r}"
            )
        k, normal = self.compensation_k, self.num_experts - len(poison)
        if k is not None:
            if isinstance(k, bool) or not isinstance(k, int):
                raise TypeError(f"compensation_k: expected an int or None, got {type(k).__name__}")
            if not 0 <= k <= normal:
                raise ValueError(
                    f"compensation_k: expected 0 <= k <= {normal} (num_experts minus the "
                    f"poisoning experts), got {k}"
                )
        if self.peft_type not in PEFT_TYPES:
            raise ValueError(f"peft_type: expected one of {PEFT_TYPES}, got {self.peft_type!r}")

    @property
    def scaling(self) -> float:
        return self.lora_alpha / self.r

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["poison_experts"] = list(self.poison_experts)
        return data

    def save_pretrained(self, save_directory: str | os.PathLike) -> None:
        """Write ``adapter_config.json`` into ``save_directory`` (created if missing)."""
        os.makedirs(save_directory, exist_ok=True)
        with open(os.path.join(save_directory, CONFIG_NAME), "w") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> LoPEConfig:
        """Read ``adapter_config.json``; another adapter type or unknown keys are refused."""
        path = os.path.join(directory, CONFIG_NAME)
        if not os.path.isfile(path):
            raise ValueError(f"directory: no {CONFIG_NAME} in {os.fspath(directory)!r}")
        with open(path) as f:
            data = json.load(f)
        kind = data.get("peft_type")
        if kind not in PEFT_TYPES:
            raise ValueError(f"directory: {path} holds a {kind!r} adapter, not one of {PEFT_TYPES}")
        known = {f.name for f in dataclasses.fields(LoPEConfig)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"directory: {path} has unknown config keys {unknown}")
        data["poison_experts"] = tuple(data.get("poison_experts", ()))
        target = HydraLoRAConfig if kind == "HYDRALORA" else LoPEConfig
        return target(**data)


@dataclass
class HydraLoRAConfig(LoPEConfig):
    """HydraLoRA: the same mixture with no poisoning expert (every expert trains and is used).

    Example:
        >>> HydraLoRAConfig().poison_experts
        ()
    """

    poison_experts: tuple[int, ...] = ()
    peft_type: str = "HYDRALORA"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.poison_experts:
            raise ValueError(
                f"poison_experts: HydraLoRA has no poisoning expert, got {self.poison_experts}"
            )
