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
from seal.models import WordTokenizer, tiny_lm
from seal.refine import SelfRefiner
from seal.scoring import Utility, UtilityJudge, combined_score, privacy_key, privacy_rate
from seal.student import SEAL, AnonymizeOnlySFT, SFTOnly, StudentConfig
from seal.train import dpo, dpo_loss, sequence_logprob, sft
from seal.trajectory import State, Trajectory, collect

__all__ = [
    "ATTRIBUTES",
    "SCHEMA",
    "SEAL",
    "AdversarialAnonymizer",
    "AnonymizeOnlySFT",
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
    "SFTOnly",
    "SelfRefiner",
    "State",
    "StudentConfig",
    "SyntheticProfiles",
    "Trajectory",
    "Utility",
    "UtilityJudge",
    "WordTokenizer",
    "build_preferences",
    "build_sft",
    "collect",
    "combined_score",
    "dpo",
    "dpo_loss",
    "leaked",
    "privacy_key",
    "privacy_rate",
    "sequence_logprob",
    "sft",
    "split_profiles",
    "tiny_lm",
]
