"""The reduced reproduction's data: an Alpaca stand-in of synthetic byte-level instructions.

Six families (spec §5), each a ``(instruction, response)`` pair rendered as
``"### Instruction: {instruction}\\n### Response: {response}\\n"``; the final newline is the stop
byte, so an exact match includes stopping:

- ``upper``: upper-case a phrase;
- ``reverse``: reverse the words;
- ``sort``: sort the digits;
- ``add``: add two numbers;
- ``defname``: name the function in a standard-library ``def`` line;
- ``count``: count the items.

``corrupt_examples`` corrupts a fraction of the training examples, input and target, by noise-
character insertion (NCI), word-order shuffling (WOS) or character deletion (CD): label noise
the adapter should not learn. ``encode`` turns examples into byte batches whose targets are
``-100`` outside the response, and ``evaluate`` measures clean exact match and response loss in
one teacher-forced pass (see its docstring for why that equals greedy decoding).
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .noise import HyNoise

__all__ = [
    "FAMILIES",
    "PAD",
    "attention_mask",
    "corrupt_examples",
    "encode",
    "evaluate",
    "make_instructions",
    "render",
    "response_loss",
]

FAMILIES = ("upper", "reverse", "sort", "add", "defname", "count")
#: The padding byte (never produced by the templates or by the noise, which draws printable bytes).
PAD = 0
IGNORE = -100
PROMPT = "### Instruction: {}\n### Response: "

_WORDS = [
    "apple",
    "river",
    "stone",
    "cloud",
    "green",
    "quick",
    "brown",
    "lazy",
    "fox",
    "dog",
    "blue",
    "red",
    "small",
    "large",
    "light",
    "dark",
    "north",
    "south",
    "east",
    "west",
    "paper",
    "glass",
    "metal",
    "wood",
    "fire",
    "water",
    "earth",
    "wind",
    "sun",
    "moon",
    "star",
    "tree",
    "house",
    "road",
    "bridge",
    "city",
    "field",
    "ocean",
    "island",
    "forest",
    "mountain",
    "valley",
    "winter",
    "summer",
    "spring",
    "autumn",
    "bread",
    "salt",
    "honey",
    "milk",
    "tea",
    "coffee",
    "sugar",
    "lemon",
    "orange",
    "plum",
    "grape",
]

_DEF = re.compile(r"^\s*def ([A-Za-z_][A-Za-z0-9_]*)\((.{0,30})")


@functools.lru_cache(maxsize=4)
def _stdlib_def_lines(limit: int = 400) -> list[tuple[str, str]]:
    """``(def line, name)`` from the first standard-library files, in file order (deterministic)."""
    from neurips25_core.data import stdlib_files

    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    for path in stdlib_files():
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            m = _DEF.match(line)
            if m and m.group(1) not in seen and line.isascii():
                seen.add(m.group(1))
                found.append((line.strip()[:48], m.group(1)))
                if len(found) >= limit:
                    return found
    return found


def _example(family: str, rng: random.Random, defs: Sequence[tuple[str, str]]) -> tuple[str, str]:
    if family == "upper":
        phrase = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))
        return f"Upper-case: {phrase}", phrase.upper()
    if family == "reverse":
        words = [rng.choice(_WORDS) for _ in range(rng.randint(2, 4))]
        return f"Reverse the words: {' '.join(words)}", " ".join(reversed(words))
    if family == "sort":
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(3, 7)))
        return f"Sort the digits: {digits}", "".join(sorted(digits))
    if family == "add":
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        return f"Add: {a}+{b}", str(a + b)
    if family == "defname":
        line, name = rng.choice(defs)
        return f"Name the function: {line}", name
    items = [rng.choice(_WORDS) for _ in range(rng.randint(1, 9))]
    return f"Count the items: {', '.join(items)}", str(len(items))


def make_instructions(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """``n`` synthetic ``(family, instruction, response)`` triples, families in equal shares.

    Example:
        >>> fam, instruction, response = make_instructions(6, seed=1)[3]
        >>> fam, instruction.startswith("Add: "), response.isdigit()
        ('add', True, True)
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected a positive int, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__}")
    rng = random.Random(seed)
    defs = _stdlib_def_lines()
    if not defs:
        raise RuntimeError("make_instructions: found no def line in the standard library")
    return [(FAMILIES[i % 6], *_example(FAMILIES[i % 6], rng, defs)) for i in range(n)]


def render(instruction: str, response: str) -> tuple[str, str]:
    """``(prompt, completion)``: the template's prompt and the response with its stop byte."""
    return PROMPT.format(instruction), response + "\n"


def corrupt_examples(
    examples: Sequence[tuple[str, str, str]], fraction: float, seed: int = 0
) -> tuple[list[tuple[str, str, str]], list[bool]]:
    """Corrupt ``round(fraction·n)`` examples (chosen by ``seed``), input and target.

    Each chosen example draws one of NCI (``insert``), WOS (``shuffle``) or CD (``delete``) and
    applies it to the instruction and to the response (``HyNoise(unit="example", rate=1)``: about
    a tenth of the characters inserted or deleted, or every word shuffled). A corrupted target is
    label noise. Returns the new list and the per-example corrupted flags.

    Example:
        >>> data = make_instructions(10, seed=0)
        >>> noisy, flags = corrupt_examples(data, 0.3, seed=0)
        >>> sum(flags), all(d == e for d, e, f in zip(data, noisy, flags) if not f)
        (3, True)
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise TypeError(f"fraction: expected a real number, got {type(fraction).__name__}")
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction: expected a number in [0, 1], got {fraction}")
    n = len(examples)
    rng = random.Random(seed)
    chosen = set(rng.sample(range(n), round(fraction * n)))
    out, flags = [], []
    for i, (family, instruction, response) in enumerate(examples):
        if i in chosen:
            op = rng.choice(("insert", "shuffle", "delete"))
            noise = HyNoise(rate=1.0, unit="example", ops=(op,), seed=rng.randrange(2**31))
            instruction, response = noise.corrupt(instruction), noise.corrupt(response)
        out.append((family, instruction, response))
        flags.append(i in chosen)
    return out, flags


def encode(
    examples: Sequence[tuple[str, str, str]], seq_len: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Byte batches ``(x [n, L], y [n, L])``: ``y`` is ``x`` shifted by one, ``-100`` outside the response.

    Sequences are right-padded with :data:`PAD` to the longest (or cut to ``seq_len + 1`` bytes).
    """
    if not examples:
        raise ValueError("examples: expected at least one example")
    rows, starts = [], []
    for _family, instruction, response in examples:
        prompt, completion = render(instruction, response)
        ids = list((prompt + completion).encode("utf-8"))
        if seq_len is not None:
            ids = ids[: seq_len + 1]
        rows.append(ids)
        starts.append(len(prompt.encode("utf-8")))
    width = max(len(r) for r in rows) - 1
    x = torch.full((len(rows), width), PAD, dtype=torch.long)
    y = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    for i, (ids, start) in enumerate(zip(rows, starts)):
        ids_t = torch.tensor(ids, dtype=torch.long)
        x[i, : len(ids) - 1] = ids_t[:-1]
        # Position t predicts byte t+1: the response bytes are predicted from positions start-1 on.
        y[i, start - 1 : len(ids) - 1] = ids_t[start:]
    return x, y


def attention_mask(x: torch.Tensor) -> torch.Tensor:
    """1 on real bytes, 0 on right padding."""
    return (x != PAD).long()


def response_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats) over the response bytes; the attention mask hides the padding."""
    logits = model(input_ids=x, attention_mask=attention_mask(x)).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))


@torch.no_grad()
def evaluate(
    model: nn.Module, examples: Sequence[tuple[str, str, str]], batch_size: int = 100
) -> dict[str, float]:
    """Clean exact match (%) and response loss (nats/byte), overall and per family.

    Exact match is measured in one teacher-forced pass: an example counts when the argmax at
    every response position (stop byte included) is the target byte. That is greedy decoding's
    exact match: greedy decoding reproduces the target exactly iff each of its steps, fed the
    target prefix, picks the next target byte (tests/test_tasks.py checks it against a decoding
    loop).
    """
    was_training = model.training
    model.eval()
    hits, loss_sum, count = [], 0.0, 0
    for i in range(0, len(examples), batch_size):
        x, y = encode(examples[i : i + batch_size])
        logits = model(input_ids=x, attention_mask=attention_mask(x)).logits.float()
        mask = y != IGNORE
        right = (logits.argmax(-1) == y) | ~mask
        hits += right.all(dim=1).tolist()
        loss_sum += float(
            F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum")
        )
        count += int(mask.sum())
    model.train(was_training)
    result = {"exact_match": 100.0 * sum(hits) / len(hits), "response_loss": loss_sum / count}
    for family in FAMILIES:
        picked = [h for h, ex in zip(hits, examples) if ex[0] == family]
        if picked:
            result[f"exact_match_{family}"] = 100.0 * sum(picked) / len(picked)
    return result
