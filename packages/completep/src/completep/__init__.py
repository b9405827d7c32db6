"""Don't be lazy: CompleteP enables compute-efficient deep transformers (NeurIPS 2025).

SP, μP, depth-μP (α = 0.5) and CompleteP (α = 1) for transformers Llama models: Table 1's init,
residual-branch multipliers and per-group AdamW hyperparameters.
"""

from completep.llama import (
    ParameterizationHandle,
    from_llama_config,
    param_groups,
    parameterize,
    scaled_config,
    to_granite_config,
)
from completep.params import GROUPS, GroupScale, Multipliers, ParamConfig, multipliers
from completep.reference import reference_logits

__all__ = [
    "GROUPS",
    "GroupScale",
    "Multipliers",
    "ParamConfig",
    "ParameterizationHandle",
    "from_llama_config",
    "multipliers",
    "param_groups",
    "parameterize",
    "reference_logits",
    "scaled_config",
    "to_granite_config",
]
