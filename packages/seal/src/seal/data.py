"""Synthetic profiles with five personal attributes and cue ladders (spec §5, issue 38 item 1).

Every cue that reveals an attribute has a ladder *specific -> general -> removed*: the specific
phrase names the value ("I live in Zurich"), the general phrase keeps the sentence but not the
value ("I live in a city"), and the removed rung drops the sentence. Hardness 1 cues are explicit
("I'm 34"); hardness 2-3 are indirect (a landmark, a work routine). Splits are by profile, never by
comment, because the comments of one profile share cues.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "ATTRIBUTES",
    "SCHEMA",
    "AttributeSchema",
    "Cue",
    "Profile",
    "SyntheticProfiles",
    "split_profiles",
]


@dataclass(frozen=True)
class AttributeSchema:
    """The attributes and their value sets (order fixed, so label ids are stable)."""

    values: Mapping[str, tuple[str, ...]]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.values)

    def check(self, attribute: str, value: str | None = None) -> None:
        if attribute not in self.values:
            raise ValueError(
                f"attribute: unknown attribute {attribute!r}; known: {', '.join(self.values)}"
            )
        if value is not None and value not in self.values[attribute]:
            raise ValueError(f"value: {value!r} is not a value of {attribute!r}")


SCHEMA = AttributeSchema(
    values={
        "age": ("18-24", "25-34", "35-44", "45-54", "55+"),
        "sex": ("female", "male"),
        "city": (
            "Zurich",
            "Paris",
            "Berlin",
            "Madrid",
            "Rome",
            "Vienna",
            "Oslo",
            "Lisbon",
            "Prague",
            "Dublin",
        ),
        "occupation": (
            "nurse",
            "teacher",
            "engineer",
            "chef",
            "lawyer",
            "farmer",
            "pilot",
            "accountant",
            "electrician",
            "journalist",
        ),
        "relationship": ("single", "married", "divorced", "in a relationship"),
    }
)
ATTRIBUTES = SCHEMA.names

_AGE_NUMBERS = {
    "18-24": (19, 23),
    "25-34": (26, 33),
    "35-44": (36, 43),
    "45-54": (46, 53),
    "55+": (58, 67),
}
_AGE_INDIRECT = {
    "18-24": "I just finished my first year at university",
    "25-34": "we are saving for our first flat",
    "35-44": "my kids started primary school this year",
    "45-54": "my eldest is leaving home for college soon",
    "55+": "my grandchildren visit every sunday",
}
_SEX = {
    "female": ("as a woman I notice this a lot", "my husband jokes about it"),
    "male": ("as a man I notice this a lot", "my wife jokes about it"),
}
_LANDMARKS = {
    "Zurich": "the lake near the Bahnhofstrasse",
    "Paris": "the view from Montmartre",
    "Berlin": "the crowds at the Brandenburg gate",
    "Madrid": "the shade in the Retiro park",
    "Rome": "the tourists at the Colosseum",
    "Vienna": "the cafes on the Ringstrasse",
    "Oslo": "the ferries by the Aker quay",
    "Lisbon": "the trams up to Alfama",
    "Prague": "the bridge under the castle",
    "Dublin": "the pubs in Temple bar",
}
_ROUTINES = {
    "nurse": "my night shifts on the ward",
    "teacher": "grading homework every evening",
    "engineer": "debugging the plant control system",
    "chef": "prepping the kitchen before dinner service",
    "lawyer": "drafting briefs for court",
    "farmer": "milking the cows at dawn",
    "pilot": "long haul flights and jet lag",
    "accountant": "closing the books at quarter end",
    "electrician": "rewiring old houses",
    "journalist": "chasing sources before the deadline",
}
_REL_EXPLICIT = {
    "single": "I am single",
    "married": "I am married",
    "divorced": "I am divorced",
    "in a relationship": "I am in a relationship",
}
_REL_INDIRECT = {
    "single": "nobody waits for me at home",
    "married": "my spouse and I celebrated our anniversary",
    "divorced": "since the divorce I have the kids every other week",
    "in a relationship": "my partner and I are thinking about moving in together",
}
_FILLERS = (
    "honestly the weather has been strange lately",
    "I have been reading a lot of books again",
    "the prices at the supermarket keep going up",
    "my neighbour got a new dog",
    "I finally fixed my old bicycle",
    "the local team lost again on saturday",
    "I tried a new recipe for soup",
    "the internet was down all morning",
)
_TOPICS = ("weekend", "work", "travel", "family", "food", "hobbies")


@dataclass(frozen=True)
class Cue:
    """One attribute-revealing phrase and its ladder ``rungs = (specific, general, removed="")``."""

    attribute: str
    value: str
    hardness: int
    specific: str
    general: str

    @property
    def rungs(self) -> tuple[str, str, str]:
        return (self.specific, self.general, "")


@dataclass(frozen=True)
class Profile:
    id: int
    attributes: dict[str, str]
    comments: tuple[str, ...]
    text: str
    cues: tuple[Cue, ...]


def _cue(attribute: str, value: str, hardness: int, rng: random.Random) -> Cue:
    if attribute == "age":
        if hardness == 1:
            lo, hi = _AGE_NUMBERS[value]
            return Cue(attribute, value, 1, f"I'm {rng.randint(lo, hi)}", "I'm an adult")
        return Cue(attribute, value, hardness, _AGE_INDIRECT[value], "life keeps me busy")
    if attribute == "sex":
        explicit, indirect = _SEX[value]
        if hardness == 1:
            return Cue(attribute, value, 1, explicit, "as a person I notice this a lot")
        return Cue(attribute, value, hardness, indirect, "my partner jokes about it")
    if attribute == "city":
        if hardness == 1:
            return Cue(attribute, value, 1, f"I live in {value}", "I live in a city")
        return Cue(
            attribute, value, hardness, f"I love {_LANDMARKS[value]}", "I love my neighbourhood"
        )
    if attribute == "occupation":
        if hardness == 1:
            return Cue(attribute, value, 1, f"I work as a {value}", "I have a job")
        return Cue(
            attribute, value, hardness, f"I am tired of {_ROUTINES[value]}", "I am tired of work"
        )
    if attribute == "relationship":
        if hardness == 1:
            return Cue(attribute, value, 1, _REL_EXPLICIT[value], "my private life is fine")
        return Cue(attribute, value, hardness, _REL_INDIRECT[value], "my private life is fine")
    raise ValueError(f"attribute: unknown attribute {attribute!r}")


def _pair(name: str, value: object) -> tuple[int, int]:
    if (
        not isinstance(value, tuple | list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise TypeError(f"{name}: expected a pair of ints (low, high), got {value!r}")
    lo, hi = value
    if lo < 1 or hi < lo:
        raise ValueError(f"{name}: need 1 <= low <= high, got {value!r}")
    return int(lo), int(hi)


class SyntheticProfiles(Sequence[Profile]):
    """``n`` profiles, each with all five attributes, one cue per attribute spread over 2-3 comments.

    Deterministic per ``seed``. ``hardness=(1, 3)`` draws each cue's hardness uniformly in [1, 3].
    """

    def __init__(
        self,
        n: int,
        comments_per_profile: tuple[int, int] = (2, 3),
        hardness: tuple[int, int] = (1, 3),
        seed: int = 0,
    ) -> None:
        if not isinstance(n, int) or isinstance(n, bool):
            raise TypeError(f"n: expected an int, got {type(n).__name__}")
        if n < 1:
            raise ValueError(f"n: need at least one profile, got {n}")
        self.comments_per_profile = _pair("comments_per_profile", comments_per_profile)
        self.hardness = _pair("hardness", hardness)
        if self.hardness[1] > 3:
            raise ValueError(f"hardness: levels are 1-3, got {hardness!r}")
        self.seed = seed
        rng = random.Random(seed)
        self._profiles = tuple(self._make(i, rng) for i in range(n))

    def _make(self, pid: int, rng: random.Random) -> Profile:
        attrs = {a: rng.choice(vals) for a, vals in SCHEMA.values.items()}
        cues = tuple(_cue(a, attrs[a], rng.randint(*self.hardness), rng) for a in ATTRIBUTES)
        k = rng.randint(*self.comments_per_profile)
        slots: list[list[str]] = [[] for _ in range(k)]
        order = list(cues)
        rng.shuffle(order)
        for j, cue in enumerate(order):
            slots[j % k].append(cue.specific)
        comments = []
        for sentences in slots:
            parts = [*sentences, *rng.sample(_FILLERS, 2)]
            rng.shuffle(parts)
            comments.append(f"about {rng.choice(_TOPICS)}: " + ". ".join(parts) + ".")
        return Profile(pid, attrs, tuple(comments), "\n".join(comments), cues)

    def __len__(self) -> int:
        return len(self._profiles)

    def __getitem__(self, i):  # type: ignore[override]
        return self._profiles[i]


def split_profiles(
    profiles: Sequence[Profile],
    sizes: tuple[int, int, int],
    seed: int = 0,
    unseen: tuple[str, str] | None = None,
) -> tuple[list[Profile], list[Profile], list[Profile]]:
    """Split by profile into (train, attacker, test); raises if ``sizes`` do not fit.

    With ``unseen=(a, b)`` (two attribute names, e.g. ``("city", "occupation")``) the test split
    holds *unseen attribute combinations*: whole (a, b) value pairs, drawn in a seeded order, go to
    test until it is full, and no train profile has a held-out pair. The profiles of the last
    held-out pair that do not fit in test go to the attacker split (the evaluation attacker may see
    them; the student, trained on the train split, never does), then the attacker split is filled
    with seen-pair profiles. ``ValueError`` when the held-out pairs' overflow exceeds the attacker
    split.

    Example:
        >>> ps = SyntheticProfiles(120, seed=0)
        >>> train, attack, test = split_profiles(ps, (60, 20, 30), unseen=("city", "occupation"))
        >>> pair = lambda p: (p.attributes["city"], p.attributes["occupation"])
        >>> {pair(p) for p in train} & {pair(p) for p in test}
        set()
    """
    if len(sizes) != 3 or any(not isinstance(s, int) or s < 0 for s in sizes):
        raise ValueError(f"sizes: expected three non-negative ints, got {sizes!r}")
    if sum(sizes) > len(profiles):
        raise ValueError(f"sizes: {sum(sizes)} profiles requested, only {len(profiles)} given")
    idx = list(range(len(profiles)))
    random.Random(seed).shuffle(idx)
    a, b, c = sizes
    pick = [profiles[i] for i in idx]
    if unseen is None:
        return pick[:a], pick[a : a + b], pick[a + b : a + b + c]
    if (
        not isinstance(unseen, tuple | list)
        or len(unseen) != 2
        or len(set(unseen)) != 2
        or any(u not in ATTRIBUTES for u in unseen)
    ):
        raise ValueError(
            f"unseen: expected two different attribute names of {ATTRIBUTES}, got {unseen!r}"
        )

    def pair(p: Profile) -> tuple[str, str]:
        return p.attributes[unseen[0]], p.attributes[unseen[1]]

    groups: dict[tuple[str, str], list[Profile]] = {}
    for p in pick:
        groups.setdefault(pair(p), []).append(p)
    order = sorted(groups)
    random.Random(f"seal-unseen-{seed}").shuffle(order)
    test: list[Profile] = []
    overflow: list[Profile] = []
    held: set[tuple[str, str]] = set()
    for key in order:
        if len(test) >= c:
            break
        held.add(key)
        room = c - len(test)
        test += groups[key][:room]
        overflow += groups[key][room:]
    if len(overflow) > b:
        raise ValueError(
            f"sizes: {len(overflow)} profiles of held-out {unseen} pairs do not fit in the "
            f"attacker split of {b}"
        )
    # len(pick) >= a + b + c, so at least a + b - len(overflow) seen-pair profiles are left
    seen = [p for p in pick if pair(p) not in held]
    return seen[:a], overflow + seen[a : a + b - len(overflow)], test
