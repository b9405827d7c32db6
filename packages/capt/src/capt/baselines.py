"""The prompt-tuning baselines on the same hooks as CaPT, and Finding II's instance token.

Each baseline is a :class:`~capt.config.CapsuleConfig` (so ``get_peft_model``, ``save_pretrained``,
``generate`` and ``unload`` work unchanged), which is also what makes the reductions exact:

* :func:`PromptTuning` ``(n)``: Lester et al.'s shallow prompt tuning, ``n`` trainable input
  embeddings in front of the tokens (``instance_source="none"``, ``deep=False``); with the same
  prompts it equals peft's ``PromptTuningConfig(num_virtual_tokens=n)`` (tested, 1e-6).
* :func:`DeepPromptTuning` ``(n)``: P-tuning v2-style hidden-state prompts, the ``n`` slots
  overwritten entering every layer (``instance_source="none"``, ``deep=True``): CaPT without the
  instance part.
* :class:`InstanceToken`: the training-free instance token (``p = 0``, one slot ``α s``), alone on a
  base model or prepended to a trained :func:`PromptTuning` model (Finding II: ``[α s; p]``).

P-tuning, P-tuning v2 (prefix) and LoRA are peft's own (``PromptEncoderConfig``,
``PrefixTuningConfig``, ``LoraConfig``), installed with the ``peers`` extra; the benchmark runs them.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from .config import CapsuleConfig
from .model import CapsuleModel, get_peft_model
from .ops import check_alpha

__all__ = ["DeepPromptTuning", "InstanceToken", "PromptTuning"]


def _length(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n: expected an int number of prompt tokens, got {n!r}")
    if n < 1:
        raise ValueError(f"n: expected >= 1 prompt tokens, got {n}")
    return n


def PromptTuning(n: int, init: str = "vocab", init_std: float = 0.02) -> CapsuleConfig:
    """Shallow prompt tuning with ``n`` virtual tokens (peft's ``PromptTuningConfig``).

    Args:
        n: number of prompt tokens (>= 1).
        init: ``"vocab"`` (peft's ``SAMPLE_VOCAB``, the default here as in the issue's peft arms),
            ``"normal"`` or ``"zeros"``.
        init_std: std of ``"normal"``.

    Example:
        >>> PromptTuning(20).capsule_length, PromptTuning(20).deep
        (20, False)
    """
    return CapsuleConfig(
        instance_source="none", capsule_length=_length(n), deep=False, init=init, init_std=init_std
    )


def DeepPromptTuning(n: int, init: str = "normal", init_std: float = 0.02) -> CapsuleConfig:
    """Deep (P-tuning v2-style hidden-state) prompt tuning: ``n`` slots rewritten at every layer.

    ``DeepPromptTuning(1)`` has CaPT's parameter count (L·d) and lacks only the instance part.
    """
    return CapsuleConfig(
        instance_source="none", capsule_length=_length(n), deep=True, init=init, init_std=init_std
    )


class InstanceToken:
    """Finding II's training-free instance token ``α s`` (the masked mean of the input embeddings).

    ``InstanceToken().apply(base)`` puts the pure token (``p = 0``, one slot, frozen) in front of a
    base model; ``InstanceToken().apply(pt_model)`` puts it in front of the prompts of a trained
    :func:`PromptTuning` model, ``[α s; p_1 … p_n]``, without further training (the prompts are
    copied, the model frozen; ``pt_model`` is unloaded, as its base now carries the new hooks).

    Args:
        alpha: α, finite.
    """

    def __init__(self, alpha: float = 1.0) -> None:
        self.alpha = check_alpha(alpha)

    def config(self) -> CapsuleConfig:
        """The pure instance token on a base model: one shallow slot ``0 + α s``."""
        return CapsuleConfig(
            instance_source="embedding", capsule_length=1, deep=False, alpha=self.alpha
        )

    def apply(self, model: nn.Module) -> CapsuleModel:
        """A frozen :class:`CapsuleModel` with the instance token (see the class docstring)."""
        if isinstance(model, CapsuleModel):
            cfg = model.peft_config
            if cfg.deep or cfg.instance_source != "none":
                raise ValueError(
                    "model: the instance token goes in front of a shallow PromptTuning(n) model "
                    f"(instance_source='none', deep=False), got {cfg}"
                )
            prompts = model.capsules.detach().clone()
            base = model.unload()
            config = dataclasses.replace(
                cfg, instance_source="embedding", fusion="prepend", alpha=self.alpha
            )
            wrapped = get_peft_model(base, config)
            with torch.no_grad():
                wrapped.capsules.copy_(prompts)
        elif isinstance(model, nn.Module):
            wrapped = get_peft_model(model, self.config())
        else:
            raise TypeError(
                f"model: expected a transformers model or a CapsuleModel, got {type(model).__name__}"
            )
        wrapped.capsules.requires_grad_(False)  # training-free
        return wrapped.eval()
