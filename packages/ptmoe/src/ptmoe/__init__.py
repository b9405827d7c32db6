"""PT-MoE: An Efficient Finetuning Framework for Integrating Mixture-of-Experts into Prompt Tuning (NeurIPS 2025).

Routed low-rank prompt experts: ``P(x) = (Σ_{i∈topk} w_i A_i) B`` with a shared ``B``.
"""

from . import budget
from .baselines import DecomposedPromptTuning, PromptTuning, SMoP, apply_prompt
from .config import PTMoEConfig
from .model import PromptTunedModel, PTMoEModel, get_peft_model
from .ops import compose, masked_mean, route, svd_factors
from .prompt import PromptMoE, PromptOutput

__all__ = [
    "DecomposedPromptTuning",
    "PTMoEConfig",
    "PTMoEModel",
    "PromptMoE",
    "PromptOutput",
    "PromptTunedModel",
    "PromptTuning",
    "SMoP",
    "apply_prompt",
    "budget",
    "compose",
    "get_peft_model",
    "masked_mean",
    "route",
    "svd_factors",
]
