"""Noise-Robustness Through Noise: A Framework Combining Asymmetric LoRA with Poisoning MoE (NeurIPS 2025).

So far: the math (``lope.ops``: ``expert_mix``, ``compensate``, ``route``, ``adapter``) with its
float64 reference (``lope.reference``). The layer, the peft-style adapter, HyNoise, training and
the benchmarks are not built yet (see the README).
"""

from .ops import adapter, compensate, expert_mix, route

__all__ = ["adapter", "compensate", "expert_mix", "route"]
