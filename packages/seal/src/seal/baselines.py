"""Anonymizers that need no training (spec §3 ``seal.baselines``, §5 "Trajectories").

Protocol: ``.anonymize(text, feedback=None) -> str``.

- ``Identity``: returns the text.
- ``PIIScrubber``: explicit spans only -- numbers and capitalised proper names -- replaced by a type
  tag, the open analogue of the paper's Azure-PII baseline. Indirect cues survive by design.
- ``AdversarialAnonymizer``: the teacher (the stand-in for GPT-4o in Staab et al.'s feedback loop). It
  rewrites only the cues of the attributes named in the feedback with a pluggable ``rewrite``
  function; the default ``RuleRewriter`` is the stochastic rule rewriter of spec §5 and runs on CPU.
  ``seal.trajectory.collect`` drives it against an attacker and the utility judge.

The rule rewriter reads only the text and the feedback (attacker guesses): never the profile's truth.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from seal.adversary import AttributeInferrer, Inference, LexiconInferrer
from seal.data import (
    _AGE_INDIRECT,
    _AGE_NUMBERS,
    _LANDMARKS,
    _REL_EXPLICIT,
    _REL_INDIRECT,
    _ROUTINES,
    _SEX,
    SCHEMA,
)
from seal.scoring import _text

__all__ = [
    "AdversarialAnonymizer",
    "Identity",
    "PIIScrubber",
    "RuleRewriter",
    "feedback_attributes",
]

Rewrite = Callable[[str, Mapping[str, Inference], random.Random], str]


def feedback_attributes(feedback: object) -> tuple[str, ...]:
    """The attributes named by ``feedback`` (a mapping keyed by attribute, or an iterable of names)."""
    if feedback is None:
        return ()
    if isinstance(feedback, str) or not isinstance(feedback, Mapping | Iterable):
        raise TypeError(
            f"feedback: expected a mapping or iterable of attribute names, got {type(feedback).__name__}"
        )
    names = tuple(feedback)
    for a in names:
        if not isinstance(a, str):
            raise TypeError(f"feedback: attribute names must be str, got {type(a).__name__}")
        try:
            SCHEMA.check(a)
        except ValueError as e:
            raise ValueError(f"feedback: {e}") from None
    return names


class Identity:
    """The original text, unchanged (the 'original' row)."""

    def anonymize(self, text: str, feedback: object = None) -> str:
        feedback_attributes(feedback)
        return _text("text", text)


_NUMBER = re.compile(r"\b\d+(?:[.,]\d+)?\b")
_CAPITALISED = re.compile(r"\b[A-Z][a-zA-Z]+\b")
_BOUNDARY = re.compile(r"(^|[.!?:]\s+|\n)$")


class PIIScrubber:
    """Replace explicit PII spans: numbers -> ``[NUMBER]``, proper names -> ``[LOCATION]``/``[NAME]``.

    A proper name is a capitalised word that does not start a sentence and is not "I". Known city
    names are tagged ``[LOCATION]`` (the typed output an entity recognizer gives), others ``[NAME]``.
    """

    def __init__(self, locations: Iterable[str] = SCHEMA.values["city"]) -> None:
        self.locations = frozenset(locations)

    def anonymize(self, text: str, feedback: object = None) -> str:
        feedback_attributes(feedback)
        text = _text("text", text)

        def name(m: re.Match[str]) -> str:
            word = m.group(0)
            if word == "I" or _BOUNDARY.search(text[: m.start()]):
                return word
            return "[LOCATION]" if word in self.locations else "[NAME]"

        return _NUMBER.sub("[NUMBER]", _CAPITALISED.sub(name, text))


@dataclass(frozen=True)
class _Variant:
    """One phrasing of one attribute value: ``specific`` matches a whole sentence (lower case)."""

    attribute: str
    value: str
    kind: str  # a kind groups phrasings that can stand in for each other (hallucination)
    specific: re.Pattern[str]
    general: str
    phrase: str = ""  # the specific phrase as the generator writes it


def _variants() -> list[_Variant]:
    out: list[_Variant] = []

    def add(attribute: str, value: str, kind: str, phrase: str, general: str) -> None:
        pattern = re.compile(re.escape(phrase.lower()))
        out.append(_Variant(attribute, value, kind, pattern, general, phrase))

    for value in SCHEMA.values["age"]:
        out.append(
            _Variant("age", value, "age-number", re.compile(r"i'm (\d{1,3})"), "I'm an adult")
        )
        add("age", value, "age-indirect", _AGE_INDIRECT[value], "life keeps me busy")
    for value, (explicit, indirect) in _SEX.items():
        add("sex", value, "sex-explicit", explicit, "as a person I notice this a lot")
        add("sex", value, "sex-indirect", indirect, "my partner jokes about it")
    for value in SCHEMA.values["city"]:
        add("city", value, "city-explicit", f"I live in {value}", "I live in a city")
        add(
            "city", value, "city-landmark", f"I love {_LANDMARKS[value]}", "I love my neighbourhood"
        )
    for value in SCHEMA.values["occupation"]:
        add("occupation", value, "occ-explicit", f"I work as a {value}", "I have a job")
        add(
            "occupation",
            value,
            "occ-routine",
            f"I am tired of {_ROUTINES[value]}",
            "I am tired of work",
        )
    for value in SCHEMA.values["relationship"]:
        add("relationship", value, "rel-explicit", _REL_EXPLICIT[value], "my private life is fine")
        add("relationship", value, "rel-indirect", _REL_INDIRECT[value], "my private life is fine")
    # the age-number pattern is shared by all five brackets: keep one entry
    seen: set[str] = set()
    unique = []
    for v in out:
        if v.kind == "age-number":
            if "age-number" in seen:
                continue
            seen.add("age-number")
            v = _Variant("age", "", "age-number", v.specific, v.general)
        unique.append(v)
    return unique


_VARIANTS = _variants()
_KIND_PHRASES: dict[str, list[tuple[str, str]]] = {}
for _v in _VARIANTS:
    if _v.kind != "age-number":
        _KIND_PHRASES.setdefault(_v.kind, []).append((_v.value, _v.phrase))
_LINE = re.compile(r"^(about [a-z]+: )?(.*)$", re.S)


def _sentences(line: str) -> tuple[str, list[str]]:
    m = _LINE.match(line)
    prefix, body = (m.group(1) or ""), m.group(2)
    parts = [s.strip() for s in re.split(r"\.(?:\s+|$)", body)]
    return prefix, [s for s in parts if s]


def _join(prefix: str, sentences: list[str]) -> str:
    return prefix + ". ".join(sentences) + ("." if sentences else "")


_GENERAL = {v.general.lower(): v.attribute for v in _VARIANTS}


def _match(sentence: str, attributes: tuple[str, ...]) -> _Variant | None:
    low = sentence.lower()
    for v in _VARIANTS:
        if v.attribute in attributes and v.specific.fullmatch(low):
            return v
    return None


_ACTIONS = ("generalize", "remove", "miss", "hallucinate")


class RuleRewriter:
    """The stochastic rule rewriter of spec §5 (the teacher's rewrite function, *ours*).

    For every sentence that is a specific cue of an attribute in the feedback: generalize
    (``p_generalize``), remove (``p_remove``), miss (``p_miss``, left as is) or hallucinate another
    specific value of the same kind (``p_hallucinate``); then, with ``p_drop``, drop one word of a
    neighbouring sentence (the utility cost of a careless rewrite). Called as
    ``rewrite(text, feedback, rng)``.
    """

    def __init__(
        self,
        p_generalize: float = 0.6,
        p_remove: float = 0.2,
        p_miss: float = 0.1,
        p_hallucinate: float = 0.1,
        p_drop: float = 0.1,
    ) -> None:
        probs = {
            "p_generalize": p_generalize,
            "p_remove": p_remove,
            "p_miss": p_miss,
            "p_hallucinate": p_hallucinate,
            "p_drop": p_drop,
        }
        for name, p in probs.items():
            if isinstance(p, bool) or not isinstance(p, int | float):
                raise TypeError(f"{name}: expected a float, got {type(p).__name__}")
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name}: must lie in [0, 1], got {p}")
        total = p_generalize + p_remove + p_miss + p_hallucinate
        if abs(total - 1.0) > 1e-9:
            raise ValueError(
                f"p_generalize: p_generalize + p_remove + p_miss + p_hallucinate must be 1, got {total}"
            )
        self.weights = (p_generalize, p_remove, p_miss, p_hallucinate)
        self.p_drop = float(p_drop)

    def _hallucinate(self, variant: _Variant, sentence: str, rng: random.Random) -> str:
        low = sentence.lower()
        if variant.kind == "age-number":
            age = int(variant.specific.fullmatch(low).group(1))
            others = [rng.randint(lo, hi) for lo, hi in _AGE_NUMBERS.values()]
            others = [a for a in others if abs(a - age) > 10] or [age + 20]
            return f"I'm {rng.choice(others)}"
        return rng.choice([p for _, p in _KIND_PHRASES[variant.kind] if p.lower() != low])

    def __call__(self, text: str, feedback: Mapping[str, Inference], rng: random.Random) -> str:
        attributes = feedback_attributes(feedback)
        if not attributes:
            return text
        lines = []
        for line in text.split("\n"):
            prefix, sents = _sentences(line)
            out: list[str | None] = list(sents)
            for k, s in enumerate(sents):
                if _GENERAL.get(s.lower()) in attributes:
                    # already on the general rung: the next rung is removal (or a miss)
                    if rng.random() >= self.weights[2]:
                        out[k] = None
                    continue
                variant = _match(s, attributes)
                if variant is None:
                    continue
                (action,) = rng.choices(_ACTIONS, self.weights)
                if action == "generalize":
                    out[k] = variant.general
                elif action == "remove":
                    out[k] = None
                elif action == "hallucinate":
                    out[k] = self._hallucinate(variant, s, rng)
                if action != "miss" and rng.random() < self.p_drop:
                    neighbours = [j for j in (k - 1, k + 1) if 0 <= j < len(out) and out[j]]
                    if neighbours:
                        j = rng.choice(neighbours)
                        words = out[j].split()
                        if len(words) > 2:
                            del words[rng.randrange(1, len(words))]
                            out[j] = " ".join(words)
            lines.append(_join(prefix, [s for s in out if s]))
        return "\n".join(lines)


class AdversarialAnonymizer:
    """The teacher: feedback-guided rewriting against an attribute attacker (Staab et al.'s loop).

    ``step(text, feedback, rng)`` is one rewrite with the attacker's feedback
    (``{attribute: Inference}``), through ``rewrite`` (default ``RuleRewriter()``; any
    ``(text, feedback, rng) -> str`` works, e.g. an LLM call). ``anonymize(text, feedback=None)``:
    with feedback, one step; without, the loop itself -- up to ``max_steps`` rounds of
    ``inferrer`` guesses with confidence >= ``min_confidence`` as feedback, stopping when none is left.
    For the trajectories the paper distils from (feedback = the *correct* guesses, utility scored by
    the judge), use ``seal.trajectory.collect``.
    """

    def __init__(
        self,
        rewrite: Rewrite | None = None,
        inferrer: AttributeInferrer | None = None,
        max_steps: int = 3,
        min_confidence: float = 0.5,
        seed: int = 0,
    ) -> None:
        if rewrite is not None and not callable(rewrite):
            raise TypeError(f"rewrite: expected a callable, got {type(rewrite).__name__}")
        if inferrer is not None and not callable(getattr(inferrer, "infer", None)):
            raise TypeError(
                f"inferrer: expected an object with .infer(texts), got {type(inferrer).__name__}"
            )
        if isinstance(max_steps, bool) or not isinstance(max_steps, int):
            raise TypeError(f"max_steps: expected an int, got {type(max_steps).__name__}")
        if max_steps < 1:
            raise ValueError(f"max_steps: must be >= 1, got {max_steps}")
        if not 0.0 <= min_confidence <= 1.0:
            raise ValueError(f"min_confidence: must lie in [0, 1], got {min_confidence}")
        self.rewrite = rewrite if rewrite is not None else RuleRewriter()
        self.inferrer = inferrer if inferrer is not None else LexiconInferrer()
        self.max_steps = max_steps
        self.min_confidence = float(min_confidence)
        self._rng = random.Random(seed)

    def step(self, text: str, feedback: Mapping[str, Inference], rng: random.Random) -> str:
        text = _text("text", text)
        feedback_attributes(feedback)
        out = self.rewrite(text, feedback, rng)
        if not isinstance(out, str):
            raise TypeError(f"rewrite: must return str, returned {type(out).__name__}")
        return out

    def anonymize(self, text: str, feedback: object = None) -> str:
        text = _text("text", text)
        if feedback is not None:
            names = feedback_attributes(feedback)
            fb = dict(feedback) if isinstance(feedback, Mapping) else dict.fromkeys(names)
            return self.step(text, fb, self._rng)
        for _ in range(self.max_steps):
            if not text.strip():
                break
            guesses = self.inferrer.infer([text])[0]
            fb = {a: g for a, g in guesses.items() if g.confidence >= self.min_confidence}
            if not fb:
                break
            text = self.step(text, fb, self._rng)
        return text
