"""Adversarial anonymization trajectories (spec §2 "Trajectories", issue 38 item 3).

For t = 0..T-1: P_t = the attacker's *correct* guesses on x_t (*ours*); stop when P_t is empty;
x_{t+1} = anonymizer(x_t, P_t); U_{t+1} = judge(x_0, x_{t+1}); U_0 is perfect. A trajectory is
``(s_0, ..., s_T)`` with ``s_i = (x_i, P_i, U_i)``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from seal.adversary import AttributeInferrer, Inference, leaked
from seal.data import Profile
from seal.scoring import Utility, UtilityJudge, privacy_key

__all__ = ["State", "Trajectory", "collect"]


@dataclass(frozen=True)
class State:
    """``s_i = (x_i, P_i, U_i)``; ``leaks`` holds the attacker's correct guesses only (P_i)."""

    text: str
    leaks: dict[str, Inference]
    utility: Utility
    guesses: dict[str, Inference] = field(default_factory=dict)  # all attacker outputs on x_i

    @property
    def key(self) -> tuple[int, float]:
        return privacy_key(inf.confidence for inf in self.leaks.values())


@dataclass(frozen=True)
class Trajectory:
    profile_id: int
    states: tuple[State, ...]

    @property
    def stopped_early(self) -> bool:
        """True when the loop ended because nothing leaked (``P_t`` empty) at the last state."""
        return not self.states[-1].leaks


def _infer(inferrer: AttributeInferrer, texts: Sequence[str]) -> list[dict[str, Inference]]:
    live = [i for i, t in enumerate(texts) if t.strip()]
    out: list[dict[str, Inference]] = [{} for _ in texts]  # an emptied text reveals nothing
    if live:
        for i, row in zip(live, inferrer.infer([texts[i] for i in live]), strict=True):
            out[i] = dict(row)
    return out


def _check_leaks(
    guesses: Mapping[str, Inference], truth: Mapping[str, str]
) -> dict[str, Inference]:
    keep = leaked(guesses, truth)
    return {a: guesses[a] for a in keep}


def collect(
    profiles: Sequence[Profile],
    anonymizer: object,
    inferrer: AttributeInferrer,
    judge: UtilityJudge,
    max_steps: int = 3,
    seed: int = 0,
) -> list[Trajectory]:
    """One trajectory per profile; deterministic per ``seed`` (each profile has its own RNG).

    ``anonymizer`` is called as ``anonymizer.step(text, leaks, rng)`` when it has ``step`` (the
    stochastic teacher), else as ``anonymizer.anonymize(text, leaks)``. The feedback is P_t --
    attacker guesses, never the profile's attributes.
    """
    if isinstance(profiles, Profile) or not isinstance(profiles, Sequence):
        raise TypeError(f"profiles: expected a sequence of Profile, got {type(profiles).__name__}")
    if not profiles:
        raise ValueError("profiles: empty")
    for p in profiles:
        if not isinstance(p, Profile):
            raise TypeError(f"profiles: expected Profile items, got {type(p).__name__}")
        if not p.text.strip():
            raise ValueError(f"profiles: profile {p.id} has an empty text")
    step = getattr(anonymizer, "step", None)
    if step is None and not callable(getattr(anonymizer, "anonymize", None)):
        raise TypeError(
            f"anonymizer: expected .step(text, feedback, rng) or .anonymize(text, feedback), "
            f"got {type(anonymizer).__name__}"
        )
    if not callable(getattr(inferrer, "infer", None)):
        raise TypeError(
            f"inferrer: expected an object with .infer(texts), got {type(inferrer).__name__}"
        )
    if not callable(getattr(judge, "score", None)):
        raise TypeError(
            f"judge: expected an object with .score(original, anonymized), got {type(judge).__name__}"
        )
    if isinstance(max_steps, bool) or not isinstance(max_steps, int):
        raise TypeError(f"max_steps: expected an int, got {type(max_steps).__name__}")
    if max_steps < 1:
        raise ValueError(f"max_steps: must be >= 1, got {max_steps}")

    rngs = [random.Random(f"seal-trajectory-{seed}-{p.id}") for p in profiles]
    originals = [p.text for p in profiles]
    texts = list(originals)
    guesses = _infer(inferrer, texts)
    perfect = [judge.score(x, x) for x in originals]
    states: list[list[State]] = [
        [State(x, _check_leaks(g, p.attributes), u, g)]
        for x, g, u, p in zip(texts, guesses, perfect, profiles, strict=True)
    ]
    for _ in range(max_steps):
        active = [i for i, s in enumerate(states) if s[-1].leaks]
        if not active:
            break
        for i in active:
            leaks = states[i][-1].leaks
            if step is not None:
                texts[i] = step(texts[i], leaks, rngs[i])
            else:
                texts[i] = anonymizer.anonymize(texts[i], leaks)
            if not isinstance(texts[i], str):
                raise TypeError(f"anonymizer: returned {type(texts[i]).__name__}, expected str")
        new = _infer(inferrer, [texts[i] for i in active])
        for i, g in zip(active, new, strict=True):
            u = judge.score(originals[i], texts[i])
            states[i].append(State(texts[i], _check_leaks(g, profiles[i].attributes), u, g))
    return [Trajectory(p.id, tuple(s)) for p, s in zip(profiles, states, strict=True)]
