"""PT-MoE: An Efficient Finetuning Framework for Integrating Mixture-of-Experts into Prompt Tuning (NeurIPS 2025).

Routed low-rank prompt experts: ``P(x) = (Σ_{i∈topk} w_i A_i) B`` with a shared ``B``.
"""

from .config import PTMoEConfig
from .model import PTMoEModel, get_peft_model
from .ops import compose, masked_mean, route, svd_factors
from .prompt import PromptMoE, PromptOutput

__all__ = [
    "PTMoEConfig",
    "PTMoEModel",
    "PromptMoE",
    "PromptOutput",
    "compose",
    "get_peft_model",
    "masked_mean",
    "route",
    "svd_factors",
]
