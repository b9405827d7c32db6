"""Self-Refining Language Model Anonymizers via Adversarial Distillation (NeurIPS 2025)."""

from seal.adversary import AttributeInferrer, BagOfWordsInferrer, Inference, LexiconInferrer, leaked
from seal.data import (
    ATTRIBUTES,
    SCHEMA,
    AttributeSchema,
    Cue,
    Profile,
    SyntheticProfiles,
    split_profiles,
)
from seal.scoring import Utility, UtilityJudge, combined_score, privacy_key, privacy_rate

__all__ = [
    "ATTRIBUTES",
    "SCHEMA",
    "AttributeInferrer",
    "AttributeSchema",
    "BagOfWordsInferrer",
    "Cue",
    "Inference",
    "LexiconInferrer",
    "Profile",
    "SyntheticProfiles",
    "Utility",
    "UtilityJudge",
    "combined_score",
    "leaked",
    "privacy_key",
    "privacy_rate",
    "split_profiles",
]
