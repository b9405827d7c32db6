"""Privacy key, rule utility judge, privacy rate and combined score (spec §2 "Scores", §2 "Evaluation").

``UtilityJudge`` is the stand-in for the paper's LLM judge (*ours*, spec §5): readability and meaning on
the 1-10 scale of Staab et al., hallucination 0/1, and ``value = mean(r/10, m/10, 1 - h)``.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from seal.data import _LANDMARKS, SCHEMA

__all__ = ["Utility", "UtilityJudge", "combined_score", "privacy_key", "privacy_rate", "tokens"]

UNK = "<unk>"
_WORD = re.compile(r"<unk>|[a-z0-9]+(?:'[a-z]+)?")


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens (``<unk>`` kept as one token)."""
    return _WORD.findall(text.lower())


def _default_specific() -> frozenset[str]:
    words: set[str] = set()
    for attribute in ("city", "occupation"):
        for value in SCHEMA.values[attribute]:
            words.update(tokens(value))
    for phrase in _LANDMARKS.values():
        words.update(w.lower() for w in re.findall(r"[A-Z][a-z]+", phrase))
    return frozenset(words)


def privacy_key(confidences: Iterable[float]) -> tuple[int, float]:
    """``(-|P|, -mean conf)`` of the leaked inferences ``P``; larger is more private; mean over none is 0.

    Compare keys with ``>`` (lexicographic): fewer leaks first, then lower confidence.
    """
    confs = list(confidences)
    for c in confs:
        if isinstance(c, bool) or not isinstance(c, int | float):
            raise TypeError(f"confidences: expected floats, got {type(c).__name__}")
        if not 0.0 <= c <= 1.0 or math.isnan(c):
            raise ValueError(f"confidences: each confidence must lie in [0, 1], got {c}")
    mean = sum(confs) / len(confs) if confs else 0.0
    return (-len(confs), -mean)


@dataclass(frozen=True)
class Utility:
    readability: float  # 1..10
    meaning: float  # 1..10
    hallucination: int  # 0 or 1
    value: float  # mean(readability/10, meaning/10, 1 - hallucination), in [0, 1]


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected str, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name}: empty text")
    return value


class UtilityJudge:
    """Deterministic rule judge of an anonymized text against its original.

    - readability = 1 + 9 * (1 - share of tokens that are new ``<unk>``); an empty rewrite scores 1.
    - meaning = 1 + 9 * difflib ratio of the word sequences.
    - hallucination = 1 when the rewrite brings in a *specific* word the original lacks (a city,
      occupation or landmark name, a number, or ``<unk>``); generalizing ("a city") is not one.
    """

    def __init__(self, specific_words: Iterable[str] | None = None) -> None:
        self.specific = (
            _default_specific()
            if specific_words is None
            else frozenset(w.lower() for w in specific_words)
        )

    def _is_specific(self, word: str) -> bool:
        return word == UNK or word.isdigit() or word in self.specific

    def score(self, original: str, anonymized: str) -> Utility:
        orig = tokens(_text("original", original))
        if not isinstance(anonymized, str):
            raise TypeError(f"anonymized: expected str, got {type(anonymized).__name__}")
        anon = tokens(anonymized)
        if not anon:
            return Utility(1.0, 1.0, 0, (0.1 + 0.1 + 1.0) / 3)
        new_unk = max(0, anon.count(UNK) - orig.count(UNK))
        readability = 1.0 + 9.0 * (1.0 - new_unk / len(anon))
        meaning = 1.0 + 9.0 * difflib.SequenceMatcher(None, orig, anon, autojunk=False).ratio()
        seen = set(orig)
        hallucination = int(any(self._is_specific(w) and w not in seen for w in anon))
        value = (readability / 10.0 + meaning / 10.0 + (1 - hallucination)) / 3.0
        return Utility(readability, meaning, hallucination, value)


def privacy_rate(
    predictions: Sequence[Mapping[str, str | None]], truths: Sequence[Mapping[str, str]]
) -> float:
    """Top-1 attacker accuracy over (profile, attribute) pairs (lower is more private)."""
    if len(predictions) != len(truths):
        raise ValueError(f"predictions: {len(predictions)} rows but truths has {len(truths)}")
    if not truths:
        raise ValueError("truths: empty")
    hits = total = 0
    for pred, truth in zip(predictions, truths, strict=True):
        for attribute, value in truth.items():
            SCHEMA.check(attribute)
            total += 1
            hits += pred.get(attribute) == value
    if total == 0:
        raise ValueError("truths: no (profile, attribute) pairs")
    return hits / total


def combined_score(privacy_original: float, privacy: float, utility: float) -> float:
    """``(P_orig - P) / P_orig - (1 - U)`` (spec §2; reproduces the paper's rows to 3 decimals)."""
    for name, v in (
        ("privacy_original", privacy_original),
        ("privacy", privacy),
        ("utility", utility),
    ):
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise TypeError(f"{name}: expected a float, got {type(v).__name__}")
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name}: must lie in [0, 1], got {v}")
    if privacy_original == 0:
        raise ValueError("privacy_original: must be > 0 (nothing to protect)")
    return (privacy_original - privacy) / privacy_original - (1.0 - utility)
