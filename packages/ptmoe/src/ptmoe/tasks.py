"""The reduced reproduction's QA data (a synthetic MRQA analogue) and SQuAD-style scoring.

Every example is ``(source, answer, domain)``: ``source`` holds a context of 3–8 templated facts
with distractors and a question, and ``answer`` is a span of the context. Six in-domain generators
(people→city, object→colour, identifier→value, person→birth year, person→job, pet→animal) train
the prompt; six out-of-domain ones test it (paraphrased facts, long contexts, list positions,
two-hop, inverse questions, comparisons). Scoring is SQuAD's: lower-case, strip punctuation and
articles, then token F1 and exact match.

The math data (a GSM8K / SVAMP analogue): two-step templated word problems in domain whose
answer is a worked solution ending ``#### N``; out of domain single-operation add, sub, mul and div
sets, a reworded two-step set and a three-step set. Scored by exact final-integer accuracy
(:func:`final_integer`: the last integer after ``####``, else the last integer).
"""

from __future__ import annotations

import random
import re
import string
from collections import Counter
from collections.abc import Callable

__all__ = [
    "IN_DOMAIN",
    "MATH_IN_DOMAIN",
    "MATH_OUT_OF_DOMAIN",
    "OUT_OF_DOMAIN",
    "QAExample",
    "exact_match",
    "f1_score",
    "final_integer",
    "math_accuracy",
    "math_examples",
    "normalize_answer",
    "qa_examples",
    "typed_guess",
    "typed_guess_scores",
]

NAMES = [
    "Alice",
    "Bruno",
    "Carla",
    "Deniz",
    "Emil",
    "Fatima",
    "Goran",
    "Hana",
    "Ivo",
    "Jana",
    "Kofi",
    "Lena",
    "Marek",
    "Nora",
    "Omar",
    "Petra",
    "Quinn",
    "Rosa",
    "Sven",
    "Tara",
]
CITIES = [
    "Paris",
    "Lagos",
    "Lima",
    "Oslo",
    "Quito",
    "Hanoi",
    "Cairo",
    "Perth",
    "Porto",
    "Riga",
    "Tunis",
    "Delhi",
    "Dakar",
    "Bern",
    "Kyiv",
    "Seoul",
]
COUNTRIES = [
    "France",
    "Nigeria",
    "Peru",
    "Norway",
    "Ecuador",
    "Vietnam",
    "Egypt",
    "Australia",
    "Portugal",
    "Latvia",
    "Tunisia",
    "India",
    "Senegal",
    "Switzerland",
    "Ukraine",
    "Korea",
]
OBJECTS = ["cup", "lamp", "chair", "kite", "book", "scarf", "bottle", "clock", "boat", "hat"]
COLOURS = ["red", "blue", "green", "yellow", "black", "white", "orange", "purple", "grey", "pink"]
JOBS = ["baker", "pilot", "nurse", "farmer", "painter", "teacher", "plumber", "chemist", "judge"]
ANIMALS = ["dog", "cat", "parrot", "horse", "goat", "rabbit", "turtle", "hamster"]
PETS = ["Rex", "Milo", "Luna", "Bella", "Otto", "Coco", "Nala", "Ziggy", "Pip", "Moss"]
IDENTIFIERS = ["max_len", "buf_size", "retries", "timeout", "depth", "offset", "limit", "width"]


class QAExample(tuple):
    """``(source, answer, domain)``."""

    __slots__ = ()

    def __new__(cls, source: str, answer: str, domain: str):
        return super().__new__(cls, (source, answer, domain))

    source = property(lambda self: self[0])
    answer = property(lambda self: self[1])
    domain = property(lambda self: self[2])


def _format(facts: list[str], question: str) -> str:
    return "Context: " + " ".join(facts) + "\nQuestion: " + question + "\nAnswer:"


def _pairs(rng: random.Random, keys: list[str], values: list[str], n: int) -> list[tuple[str, str]]:
    return list(zip(rng.sample(keys, n), [rng.choice(values) for _ in range(n)]))


def _lookup(template: str, question: str, keys, values, lo=3, hi=8):
    def gen(rng: random.Random) -> tuple[str, str]:
        pairs = _pairs(rng, keys, values, rng.randint(lo, min(hi, len(keys))))
        k, v = rng.choice(pairs)
        return _format([template.format(k=a, v=b) for a, b in pairs], question.format(k=k)), v

    return gen


def _birth(rng: random.Random) -> tuple[str, str]:
    pairs = [(n, str(rng.randint(1900, 2020))) for n in rng.sample(NAMES, rng.randint(3, 8))]
    k, v = rng.choice(pairs)
    return _format([f"{a} was born in {b}." for a, b in pairs], f"In which year was {k} born?"), v


def _list_position(rng: random.Random) -> tuple[str, str]:
    items = rng.sample(COLOURS, rng.randint(3, 6))
    i = rng.randrange(len(items))
    ordinals = ["first", "second", "third", "fourth", "fifth", "sixth"]
    facts = [f"The flags, from left to right, are {', '.join(items)}."]
    return _format(facts, f"What colour is the {ordinals[i]} flag?"), items[i]


def _two_hop(rng: random.Random) -> tuple[str, str]:
    n = rng.randint(2, 4)
    people, cities = rng.sample(NAMES, n), rng.sample(range(len(CITIES)), n)
    facts = [f"{p} lives in {CITIES[c]}." for p, c in zip(people, cities)]
    facts += [f"{CITIES[c]} is in {COUNTRIES[c]}." for c in cities]
    rng.shuffle(facts)
    j = rng.randrange(n)
    return _format(facts, f"In which country does {people[j]} live?"), COUNTRIES[cities[j]]


def _inverse(rng: random.Random) -> tuple[str, str]:
    n = rng.randint(3, 8)
    people, cities = rng.sample(NAMES, n), rng.sample(CITIES, n)
    j = rng.randrange(n)
    facts = [f"{p} lives in {c}." for p, c in zip(people, cities)]
    return _format(facts, f"Who lives in {cities[j]}?"), people[j]


def _compare(rng: random.Random) -> tuple[str, str]:
    a, b = rng.sample(NAMES, 2)
    x, y = rng.sample(range(1, 20), 2)
    facts = [f"{a} has {x} apples.", f"{b} has {y} apples."]
    return _format(facts, "Who has more apples?"), a if x > y else b


IN_DOMAIN: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "city": _lookup("{k} lives in {v}.", "Where does {k} live?", NAMES, CITIES),
    "colour": _lookup("The {k} is {v}.", "What colour is the {k}?", OBJECTS, COLOURS),
    "identifier": _lookup(
        "{k} = {v}.", "What is the value of {k}?", IDENTIFIERS, [str(i) for i in range(10, 100)]
    ),
    "birth": _birth,
    "job": _lookup("{k} works as a {v}.", "What is {k}'s job?", NAMES, JOBS),
    "pet": _lookup("{k} is a {v}.", "What animal is {k}?", PETS, ANIMALS),
}
OUT_OF_DOMAIN: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "paraphrase": _lookup(
        "{k} has a home in {v}.", "Which city does {k} reside in?", NAMES, CITIES
    ),
    "long_context": _lookup("{k} lives in {v}.", "Where does {k} live?", NAMES, CITIES, 12, 18),
    "list": _list_position,
    "two_hop": _two_hop,
    "inverse": _inverse,
    "compare": _compare,
}


def qa_examples(domains: list[str] | tuple[str, ...], count: int, seed: int = 0) -> list[QAExample]:
    """``count`` examples cycling over ``domains`` (names from ``IN_DOMAIN`` / ``OUT_OF_DOMAIN``).

    Example:
        >>> ex = qa_examples(["city"], 1, seed=0)[0]
        >>> ex.domain, ex.answer in ex.source
        ('city', True)
    """
    generators = {**IN_DOMAIN, **OUT_OF_DOMAIN}
    unknown = [d for d in domains if d not in generators]
    if unknown or not domains:
        raise ValueError(
            f"domains: unknown or empty {unknown or list(domains)}; known {sorted(generators)}"
        )
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count: expected a non-negative int, got {count!r}")
    rng = random.Random(seed)
    out = []
    for i in range(count):
        domain = domains[i % len(domains)]
        source, answer = generators[domain](rng)
        out.append(QAExample(source, answer, domain))
    return out


_VALUE_TYPES = (NAMES, CITIES, COUNTRIES, OBJECTS, COLOURS, JOBS, ANIMALS, PETS)


def typed_guess(example: QAExample) -> tuple[float, float]:
    r"""Expected (F1, EM) of guessing a uniformly random context value *of the answer's type*.

    The chance level a model reaches by knowing what kind of answer is asked (a city, a colour,
    a number) and copying any such value from the context, without finding the fact that answers
    the question. Candidates are the distinct context words of the answer's vocabulary (names,
    cities, countries, objects, colours, jobs, animals, pets), or the distinct integers when the
    answer is one. Scores above this need retrieval.

    Example:
        >>> ex = QAExample(
        ...     "Context: Alice lives in Paris. Bruno lives in Lima.\nQuestion: Where"
        ...     " does Bruno live?\nAnswer:",
        ...     "Lima",
        ...     "city",
        ... )
        >>> typed_guess(ex)
        (0.5, 0.5)
    """
    if not isinstance(example, tuple) or len(example) != 3:
        raise TypeError(f"example: expected a QAExample, got {type(example).__name__}")
    source, answer = example[0], example[1]
    context = source.split("\nQuestion:")[0]
    words = re.findall(r"\w+", context)
    if answer.isdigit():
        candidates = {w for w in words if w.isdigit()}
    else:
        vocab = next((v for v in _VALUE_TYPES if answer in v), None)
        if vocab is None:
            raise ValueError(f"example: answer {answer!r} is of no known value type")
        candidates = {w for w in words if w in vocab}
    candidates.add(answer)
    n = len(candidates)
    return (
        sum(f1_score(c, answer) for c in candidates) / n,
        sum(exact_match(c, answer) for c in candidates) / n,
    )


def typed_guess_scores(examples) -> dict[str, dict[str, float]]:
    """:func:`typed_guess` averaged per domain and over ``"all"``: ``{domain: {"f1", "em"}}``."""
    by_domain: dict[str, list[tuple[float, float]]] = {}
    for ex in examples:
        score = typed_guess(ex)
        by_domain.setdefault(ex[2], []).append(score)
        by_domain.setdefault("all", []).append(score)
    return {
        d: {"f1": sum(f for f, _ in v) / len(v), "em": sum(e for _, e in v) / len(v)}
        for d, v in by_domain.items()
    }


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower-case, drop punctuation and articles, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(truth))


def f1_score(prediction: str, truth: str) -> float:
    """SQuAD token F1 between the normalised prediction and answer (1.0 when both are empty)."""
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not pred or not gold:
        return float(pred == gold)
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


# ---------------------------------------------------------------------------------------- math
ITEMS = ["apples", "pencils", "stamps", "marbles", "coins", "shells", "cards", "eggs"]


def _math(rng: random.Random, steps: list[str], reworded: bool = False) -> tuple[str, str]:
    """A word problem applying ``steps`` (``add``, ``sub``, ``mul``, ``div``) to a start amount."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    value = rng.randint(2, 30)
    if steps[0] == "div":  # an exact first division
        value = rng.randint(2, 5) * rng.randint(2, 12)
    if reworded:
        sentences = [f"At the start of the day, {name}'s box holds {value} {item}."]
    else:
        sentences = [f"{name} has {value} {item}."]
    work = []
    for op in steps:
        if op == "div" and not any(value % d == 0 for d in range(2, 6)):
            op = "sub"  # a division that would not be exact becomes a subtraction
        if op == "add":
            x = rng.randint(2, 30)
            text = (
                f"Someone hands {name} {x} extra {item}." if reworded else f"{name} gets {x} more."
            )
            new, expr = value + x, f"{value} + {x}"
        elif op == "sub":
            x = rng.randint(1, value)
            text = f"{x} of them are lost on the way." if reworded else f"{name} gives away {x}."
            new, expr = value - x, f"{value} - {x}"
        elif op == "mul":
            x = rng.randint(2, 5)
            text = (
                f"The pile grows to {x} times its size."
                if reworded
                else f"{name} multiplies them by {x}."
            )
            new, expr = value * x, f"{value} * {x}"
        else:
            x = rng.choice([d for d in range(2, 6) if value % d == 0])
            text = (
                f"They are shared out equally among {x} friends; {name} keeps one share."
                if reworded
                else f"{name} splits them into {x} equal groups and keeps one."
            )
            new, expr = value // x, f"{value} / {x}"
        sentences.append(text)
        work.append(f"{expr} = {new}.")
        value = new
    question = f"How many {item} does {name} have now?"
    source = "Problem: " + " ".join(sentences) + " " + question + "\nSolution:"
    return source, " " + " ".join(work) + f" #### {value}"


MATH_IN_DOMAIN: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "two_step": lambda rng: _math(rng, rng.sample(["add", "sub", "mul", "div"], 2)),
}
MATH_OUT_OF_DOMAIN: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "add": lambda rng: _math(rng, ["add"]),
    "sub": lambda rng: _math(rng, ["sub"]),
    "mul": lambda rng: _math(rng, ["mul"]),
    "div": lambda rng: _math(rng, ["div"]),
    "reworded": lambda rng: _math(rng, rng.sample(["add", "sub", "mul", "div"], 2), reworded=True),
    "three_step": lambda rng: _math(
        rng, [rng.choice(["add", "sub", "mul", "div"]) for _ in range(3)]
    ),
}


def math_examples(
    domains: list[str] | tuple[str, ...], count: int, seed: int = 0
) -> list[QAExample]:
    """``count`` math problems cycling over ``domains``; ``answer`` is the worked solution.

    Example:
        >>> ex = math_examples(["add"], 1, seed=0)[0]
        >>> final_integer(ex.answer) == eval(ex.answer.split("=")[0])
        True
    """
    generators = {**MATH_IN_DOMAIN, **MATH_OUT_OF_DOMAIN}
    unknown = [d for d in domains if d not in generators]
    if unknown or not domains:
        raise ValueError(
            f"domains: unknown or empty {unknown or list(domains)}; known {sorted(generators)}"
        )
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count: expected a non-negative int, got {count!r}")
    rng = random.Random(seed)
    out = []
    for i in range(count):
        domain = domains[i % len(domains)]
        source, answer = generators[domain](rng)
        out.append(QAExample(source, answer, domain))
    return out


_INT = re.compile(r"-?\d+")


def final_integer(text: str) -> int | None:
    """The last integer after the last ``####`` (else the last integer in ``text``), or None."""
    tail = text.rsplit("####", 1)[1] if "####" in text else text
    found = _INT.findall(tail.replace(",", ""))
    return int(found[-1]) if found else None


def math_accuracy(prediction: str, answer: str) -> float:
    """1.0 when the final integers of the prediction and the answer agree."""
    truth = final_integer(answer)
    if truth is None:
        raise ValueError(f"answer: no integer in {answer!r}")
    return float(final_integer(prediction) == truth)
