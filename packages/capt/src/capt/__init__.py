"""All You Need is One: Capsule Prompt Tuning with a Single Vector (NeurIPS 2025)."""

from .ops import capsule_forward, capsule_slots, check_alpha, instance_semantics, write_slots

__all__ = ["capsule_forward", "capsule_slots", "check_alpha", "instance_semantics", "write_slots"]
