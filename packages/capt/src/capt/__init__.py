"""All You Need is One: Capsule Prompt Tuning with a Single Vector (NeurIPS 2025)."""

from .baselines import DeepPromptTuning, InstanceToken, PromptTuning
from .config import CapsuleConfig
from .model import CapsuleModel, get_peft_model
from .ops import capsule_forward, capsule_slots, check_alpha, instance_semantics, write_slots

__all__ = [
    "CapsuleConfig",
    "CapsuleModel",
    "DeepPromptTuning",
    "InstanceToken",
    "PromptTuning",
    "capsule_forward",
    "capsule_slots",
    "check_alpha",
    "get_peft_model",
    "instance_semantics",
    "write_slots",
]
