"""Noise-Robustness Through Noise: A Framework Combining Asymmetric LoRA with Poisoning MoE (NeurIPS 2025).

So far: the math (``lope.ops``, with a Triton forward of ``expert_mix`` in ``lope.kernels.mix``)
with its float64 reference (``lope.reference``), the layer (``AsymmetricLoRALinear``) and the
peft-style adapter (``get_peft_model``, ``LoPEModel``, ``LoPEConfig``, ``HydraLoRAConfig``),
``HyNoise`` and ``train_lope`` (DDP-tested). The reduced reproduction's data (``lope.tasks``) and
arms (``lope.experiment``) feed the ``quality`` benchmark case; it has not been run at quick or full
size yet (see the README).
"""

from .config import HydraLoRAConfig, LoPEConfig
from .layer import AsymmetricLoRALinear
from .model import LoPEModel, get_peft_model
from .noise import HyNoise
from .ops import adapter, compensate, expert_mix, route
from .train import LoPETrainResult, train_lope

__all__ = [
    "AsymmetricLoRALinear",
    "HyNoise",
    "HydraLoRAConfig",
    "LoPEConfig",
    "LoPEModel",
    "LoPETrainResult",
    "adapter",
    "compensate",
    "expert_mix",
    "get_peft_model",
    "route",
    "train_lope",
]
