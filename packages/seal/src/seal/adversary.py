"""Attribute attackers (spec §3 ``seal.adversary``): a bag-of-words model and a lexicon oracle.

Both return, per text, ``{attribute: Inference(value, confidence)}`` with confidence in [0, 1] -- an
attacker output, never a stand-in for correctness (spec §7). ``leaked`` keeps the inferences whose
guess matches the truth (*ours*, spec §2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from seal.data import (
    _AGE_INDIRECT,
    _LANDMARKS,
    _REL_EXPLICIT,
    _REL_INDIRECT,
    _ROUTINES,
    _SEX,
    ATTRIBUTES,
    SCHEMA,
)

__all__ = ["AttributeInferrer", "BagOfWordsInferrer", "Inference", "LexiconInferrer", "leaked"]


@dataclass(frozen=True)
class Inference:
    value: str
    confidence: float


class AttributeInferrer(Protocol):
    def infer(self, texts: Sequence[str]) -> list[dict[str, Inference]]: ...


def _texts(texts: object) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"texts: expected a sequence of str, got {type(texts).__name__}")
    out = list(texts)
    for t in out:
        if not isinstance(t, str):
            raise TypeError(f"texts: expected str items, got {type(t).__name__}")
        if not t.strip():
            raise ValueError("texts: empty text")
    return out


class BagOfWordsInferrer:
    """TF-IDF over word 1-2-grams, one scikit-learn ``LogisticRegression`` per attribute.

    ``fit(texts, attributes)`` then ``infer(texts)``; confidence = the top class probability.
    """

    def __init__(
        self, attributes: Sequence[str] = ATTRIBUTES, C: float = 10.0, seed: int = 0
    ) -> None:
        for a in attributes:
            SCHEMA.check(a)
        if not C > 0:
            raise ValueError(f"C: must be > 0, got {C}")
        self.attributes = tuple(attributes)
        self.C = float(C)
        self.seed = seed
        self._vectorizer = None
        self._models: dict = {}

    def fit(
        self, texts: Sequence[str], attributes: Sequence[Mapping[str, str]]
    ) -> BagOfWordsInferrer:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression

        texts = _texts(texts)
        if len(attributes) != len(texts):
            raise ValueError(f"attributes: {len(attributes)} rows but texts has {len(texts)}")
        self._vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
        x = self._vectorizer.fit_transform(texts)
        self._models = {}
        for a in self.attributes:
            y = [row[a] for row in attributes]
            if len(set(y)) < 2:
                raise ValueError(f"attributes: {a!r} takes a single value in the training set")
            self._models[a] = LogisticRegression(
                C=self.C, max_iter=2000, random_state=self.seed
            ).fit(x, y)
        return self

    def infer(self, texts: Sequence[str]) -> list[dict[str, Inference]]:
        if self._vectorizer is None:
            raise RuntimeError("BagOfWordsInferrer: call fit(texts, attributes) first")
        texts = _texts(texts)
        x = self._vectorizer.transform(texts)
        out: list[dict[str, Inference]] = [{} for _ in texts]
        for a, model in self._models.items():
            proba = model.predict_proba(x)
            for row, p in zip(out, proba, strict=True):
                k = int(p.argmax())
                row[a] = Inference(str(model.classes_[k]), float(p[k]))
        return out


def _lexicon() -> list[tuple[str, str, re.Pattern[str], float]]:
    """(attribute, value, pattern, confidence): explicit cues 0.95, indirect 0.7."""
    rows: list[tuple[str, str, re.Pattern[str], float]] = []

    def add(attribute: str, value: str, phrase: str, conf: float) -> None:
        rows.append((attribute, value, re.compile(r"\b" + re.escape(phrase.lower()) + r"\b"), conf))

    for value, phrase in _AGE_INDIRECT.items():
        add("age", value, phrase, 0.7)
    for value, (explicit, indirect) in _SEX.items():
        add("sex", value, explicit, 0.95)
        add("sex", value, indirect, 0.7)
    for value in SCHEMA.values["city"]:
        add("city", value, value, 0.95)
        add("city", value, _LANDMARKS[value], 0.7)
    for value in SCHEMA.values["occupation"]:
        add("occupation", value, value, 0.95)
        add("occupation", value, _ROUTINES[value], 0.7)
    for value, phrase in _REL_EXPLICIT.items():
        add("relationship", value, phrase, 0.95)
    for value, phrase in _REL_INDIRECT.items():
        add("relationship", value, phrase, 0.7)
    return rows


_AGE_BOUNDS = {
    "18-24": (18, 24),
    "25-34": (25, 34),
    "35-44": (35, 44),
    "45-54": (45, 54),
    "55+": (55, 130),
}
_AGE_RE = re.compile(r"\bi'm (\d{1,3})\b")


class LexiconInferrer:
    """Oracle rule attacker: matches the generator's own cue phrases (most confident match wins)."""

    def __init__(self) -> None:
        self._rows = _lexicon()

    def infer(self, texts: Sequence[str]) -> list[dict[str, Inference]]:
        out = []
        for text in _texts(texts):
            low = text.lower()
            row: dict[str, Inference] = {}
            for m in _AGE_RE.finditer(low):
                age = int(m.group(1))
                for value, (lo, hi) in _AGE_BOUNDS.items():
                    if lo <= age <= hi:
                        row["age"] = Inference(value, 0.95)
            for attribute, value, pattern, conf in self._rows:
                if pattern.search(low) and (
                    attribute not in row or row[attribute].confidence < conf
                ):
                    row[attribute] = Inference(value, conf)
            out.append(row)
        return out


def leaked(inferences: Mapping[str, Inference], truth: Mapping[str, str]) -> dict[str, float]:
    """``{attribute: confidence}`` of the inferences whose guess equals the true value."""
    for a in inferences:
        SCHEMA.check(a)
    for a in truth:
        SCHEMA.check(a)
    return {
        a: inf.confidence for a, inf in inferences.items() if a in truth and truth[a] == inf.value
    }
