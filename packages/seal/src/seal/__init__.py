"""Self-Refining Language Model Anonymizers via Adversarial Distillation (NeurIPS 2025)."""

from seal.adversary import AttributeInferrer, BagOfWordsInferrer, Inference, LexiconInferrer, leaked
from seal.baselines import AdversarialAnonymizer, Identity, PIIScrubber, RuleRewriter
from seal.data import (
    ATTRIBUTES,
    SCHEMA,
    AttributeSchema,
    Cue,
    Profile,
    SyntheticProfiles,
    split_profiles,
)
from seal.distill import PreferencePair, SFTExample, build_preferences, build_sft
from seal.scoring import Utility, UtilityJudge, combined_score, privacy_key, privacy_rate
from seal.trajectory import State, Trajectory, collect

__all__ = [
    "ATTRIBUTES",
    "SCHEMA",
    "AdversarialAnonymizer",
    "AttributeInferrer",
    "AttributeSchema",
    "BagOfWordsInferrer",
    "Cue",
    "Identity",
    "Inference",
    "LexiconInferrer",
    "PIIScrubber",
    "PreferencePair",
    "Profile",
    "RuleRewriter",
    "SFTExample",
    "State",
    "SyntheticProfiles",
    "Trajectory",
    "Utility",
    "UtilityJudge",
    "build_preferences",
    "build_sft",
    "collect",
    "combined_score",
    "leaked",
    "privacy_key",
    "privacy_rate",
    "split_profiles",
]
