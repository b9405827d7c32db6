"""SFT and preference data from trajectories (spec §2 "SFT data", "DPO", issue 38 item 3).

- anon: ``(x_i, P_i, U_i) -> x_j`` for j > i with ``p(s_j) > p(s_i)`` and ``u(s_j) >= u(s_i)``.
- priv: ``x_i -> P_i`` as ``attribute=value:confidence`` with confidence bucketed 1-5.
- util: ``(x_0, x_i) -> U_i``.
- preferences: ``(x_i; x_w, x_l)`` for w, l > i with ``p(s_w) > p(s_l)`` and ``u(s_w) >= u(s_l)``.

Identical texts give no pair (spec edge case). Prompts carry the attacker's guesses, never the
profile's attributes. Parsers are tolerant: malformed model output gives ``{}`` / ``None``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from seal.adversary import Inference
from seal.data import SCHEMA
from seal.scoring import Utility
from seal.trajectory import State, Trajectory

__all__ = [
    "TASKS",
    "PreferencePair",
    "SFTExample",
    "anon_prompt",
    "bucket",
    "build_preferences",
    "build_sft",
    "format_leaks",
    "format_utility",
    "parse_leaks",
    "parse_utility",
    "priv_prompt",
    "util_prompt",
]

TASKS = ("anon", "priv", "util")


@dataclass(frozen=True)
class SFTExample:
    task: str
    prompt: str
    completion: str


@dataclass(frozen=True)
class PreferencePair:
    prompt: str
    chosen: str
    rejected: str


def bucket(confidence: float) -> int:
    """Confidence in [0, 1] -> 1..5 (Staab et al.'s certainty scale)."""
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        raise TypeError(f"confidence: expected a float, got {type(confidence).__name__}")
    if not 0.0 <= confidence <= 1.0 or math.isnan(confidence):
        raise ValueError(f"confidence: must lie in [0, 1], got {confidence}")
    return min(5, 1 + int(confidence * 5))


def format_leaks(leaks: Mapping[str, Inference]) -> str:
    if not leaks:
        return "none"
    parts = []
    for a in SCHEMA.names:  # fixed order
        if a in leaks:
            parts.append(f"{a}={leaks[a].value}:{bucket(leaks[a].confidence)}")
    for a in leaks:
        SCHEMA.check(a)
    return "; ".join(parts)


_LEAK = re.compile(r"^\s*([a-z]+)\s*=\s*(.+?)\s*:\s*([1-5])\s*$")


def parse_leaks(text: str) -> dict[str, tuple[str, int]]:
    """``{attribute: (value, bucket)}`` from ``format_leaks`` output; malformed parts are skipped."""
    if not isinstance(text, str):
        raise TypeError(f"text: expected str, got {type(text).__name__}")
    out: dict[str, tuple[str, int]] = {}
    for part in text.split(";"):
        m = _LEAK.match(part)
        if m and m.group(1) in SCHEMA.values and m.group(2) in SCHEMA.values[m.group(1)]:
            out.setdefault(m.group(1), (m.group(2), int(m.group(3))))
    return out


def format_utility(u: Utility) -> str:
    return f"readability={round(u.readability)} meaning={round(u.meaning)} hallucination={u.hallucination}"


_UTIL = re.compile(r"readability=(\d+) meaning=(\d+) hallucination=([01])")


def parse_utility(text: str) -> Utility | None:
    if not isinstance(text, str):
        raise TypeError(f"text: expected str, got {type(text).__name__}")
    m = _UTIL.search(text)
    if not m:
        return None
    r, mean, h = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if not (1 <= r <= 10 and 1 <= mean <= 10):
        return None
    return Utility(float(r), float(mean), h, (r / 10 + mean / 10 + 1 - h) / 3)


def anon_prompt(text: str, leaks: Mapping[str, Inference], utility: Utility) -> str:
    return (
        f"<anon> text: {text} <leaks> {format_leaks(leaks)} "
        f"<utility> {format_utility(utility)} <rewrite>"
    )


def priv_prompt(text: str) -> str:
    return f"<priv> text: {text} <leaks>"


def util_prompt(original: str, text: str) -> str:
    return f"<util> original: {original} text: {text} <utility>"


def _trajectories(trajectories: object) -> list[Trajectory]:
    if not isinstance(trajectories, Sequence) or isinstance(trajectories, str):
        raise TypeError(
            f"trajectories: expected a sequence of Trajectory, got {type(trajectories).__name__}"
        )
    for t in trajectories:
        if not isinstance(t, Trajectory):
            raise TypeError(f"trajectories: expected Trajectory items, got {type(t).__name__}")
        if not t.states:
            raise ValueError(f"trajectories: trajectory of profile {t.profile_id} has no states")
    return list(trajectories)


def _better(a: State, b: State) -> bool:
    """``a`` is a valid target over ``b``: strictly more private, no less useful, different text."""
    return a.key > b.key and a.utility.value >= b.utility.value and a.text != b.text


def build_sft(trajectories: Sequence[Trajectory], tasks: Sequence[str] = TASKS) -> list[SFTExample]:
    trajectories = _trajectories(trajectories)
    if isinstance(tasks, str) or not tasks:
        raise ValueError(f"tasks: expected a non-empty sequence from {TASKS}, got {tasks!r}")
    for t in tasks:
        if t not in TASKS:
            raise ValueError(f"tasks: unknown task {t!r}; known: {', '.join(TASKS)}")
    out: list[SFTExample] = []
    for traj in trajectories:
        s = traj.states
        x0 = s[0].text
        for i, si in enumerate(s):
            if "anon" in tasks:
                for sj in s[i + 1 :]:
                    if _better(sj, si):
                        out.append(
                            SFTExample("anon", anon_prompt(si.text, si.leaks, si.utility), sj.text)
                        )
            if "priv" in tasks:
                out.append(SFTExample("priv", priv_prompt(si.text), format_leaks(si.leaks)))
            if "util" in tasks:
                out.append(SFTExample("util", util_prompt(x0, si.text), format_utility(si.utility)))
    return out


def build_preferences(trajectories: Sequence[Trajectory]) -> list[PreferencePair]:
    trajectories = _trajectories(trajectories)
    out: list[PreferencePair] = []
    for traj in trajectories:
        s = traj.states
        for i, si in enumerate(s):
            prompt = anon_prompt(si.text, si.leaks, si.utility)
            later = s[i + 1 :]
            for w in later:
                for lo in later:
                    if w is not lo and _better(w, lo):
                        out.append(PreferencePair(prompt, w.text, lo.text))
    return out
