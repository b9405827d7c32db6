"""Synthetic instruction pool for the reduced reproduction (spec §5): six families, planted noise.

Families: ``upper`` (upper-case words), ``reverse`` (reverse word order), ``sort`` (sort digits),
``add`` (add two numbers), ``funcname`` (name the function of a ``def`` line from the running
interpreter's standard library, via :func:`neurips25_core.data.stdlib_files`) and ``count`` (count
comma-separated items). Noise, with ground truth kept for scoring selections:

* a ``wrong_frac`` share of sequences get the correct response of another example of the same
  family (plausible but wrong: sequence noise);
* a ``filler_frac`` share of the *correct* responses get a run of 4–10 filler bytes inserted
  (token noise); ``filler_span`` records where, in response bytes.

:func:`encode_pairs` turns pairs into byte-level ``input_ids``/``labels`` (labels aligned with the
positions that predict them, ``-100`` on instruction targets) plus the response-token layout.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass

import torch

from .ops import _check_int

__all__ = [
    "FAMILIES",
    "InstructionPair",
    "encode_pairs",
    "make_instruction_pool",
    "make_target_set",
]

FAMILIES = ("upper", "reverse", "sort", "add", "funcname", "count")
_WORDS = [
    "apple",
    "river",
    "stone",
    "cloud",
    "green",
    "quick",
    "light",
    "table",
    "music",
    "paper",
    "glass",
    "north",
    "winter",
    "orange",
    "silver",
    "garden",
    "bridge",
    "candle",
    "forest",
    "window",
    "rocket",
    "planet",
    "yellow",
    "pencil",
    "castle",
]
_FILLER = "~#^"


@dataclass(frozen=True)
class InstructionPair:
    instruction: str
    response: str
    family: str
    wrong: bool = False
    filler_span: tuple[int, int] | None = None


@functools.lru_cache(maxsize=2)
def _def_names(limit: int = 400) -> tuple[tuple[str, str], ...]:
    from neurips25_core.data import stdlib_files

    pat = re.compile(r"^\s*def ([A-Za-z_]\w{2,24})\((.{0,40})\)\s*(->.{0,20})?:\s*$")
    out: list[tuple[str, str]] = []
    for f in sorted(stdlib_files())[:200]:
        try:
            text = f.read_text(encoding="utf-8", errors="ignore")
        except OSError:
            continue
        for line in text.splitlines():
            m = pat.match(line)
            if m and line.isascii():
                out.append((line.strip(), m.group(1)))
                if len(out) >= limit:
                    return tuple(out)
    if not out:
        raise RuntimeError("no `def` lines found in the standard library")
    return tuple(out)


def _example(family: str, rng: random.Random, defs) -> tuple[str, str]:
    if family == "upper":
        words = " ".join(rng.choices(_WORDS, k=rng.randint(2, 4)))
        return f"upper-case: {words}", words.upper()
    if family == "reverse":
        words = rng.choices(_WORDS, k=rng.randint(3, 5))
        return f"reverse words: {' '.join(words)}", " ".join(reversed(words))
    if family == "sort":
        digits = [str(rng.randint(0, 9)) for _ in range(rng.randint(4, 7))]
        return f"sort digits: {' '.join(digits)}", " ".join(sorted(digits))
    if family == "add":
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        return f"add: {a} + {b}", str(a + b)
    if family == "funcname":
        line, name = defs[rng.randrange(len(defs))]
        return f"name the function: {line}", name
    if family == "count":
        items = rng.choices(_WORDS, k=rng.randint(1, 9))
        return f"count items: {', '.join(items)}", str(len(items))
    raise ValueError(f"family: unknown family {family!r}; expected one of {FAMILIES}")


def make_instruction_pool(
    n: int = 1000,
    seed: int = 0,
    wrong_frac: float = 0.2,
    filler_frac: float = 0.3,
    families: tuple[str, ...] = FAMILIES,
) -> list[InstructionPair]:
    """``n`` pairs cycling through ``families`` (shuffled), with planted wrong and filler noise."""
    _check_int(n, "n", 1)
    for name, frac in (("wrong_frac", wrong_frac), ("filler_frac", filler_frac)):
        if not 0.0 <= frac <= 1.0:
            raise ValueError(f"{name}: must lie in [0, 1], got {frac}")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown or not families:
        raise ValueError(f"families: unknown {unknown}; expected a non-empty subset of {FAMILIES}")
    rng = random.Random(seed)
    defs = _def_names() if "funcname" in families else []
    fams = [families[i % len(families)] for i in range(n)]
    rng.shuffle(fams)
    clean = [_example(f, rng, defs) for f in fams]
    n_wrong = round(wrong_frac * n)
    wrong_idx = set(rng.sample(range(n), n_wrong))
    correct = [i for i in range(n) if i not in wrong_idx]
    filler_idx = set(rng.sample(correct, min(len(correct), round(filler_frac * n))))
    pool = []
    for i, (fam, (instr, resp)) in enumerate(zip(fams, clean, strict=True)):
        if i in wrong_idx:
            for _ in range(100):
                other = _example(fam, rng, defs)[1]
                if other != resp:
                    break
            pool.append(InstructionPair(instr, other, fam, wrong=True))
        elif i in filler_idx:
            pos = rng.randint(0, len(resp))
            run = rng.choice(_FILLER) * rng.randint(4, 10)
            pool.append(
                InstructionPair(
                    instr, resp[:pos] + run + resp[pos:], fam, filler_span=(pos, pos + len(run))
                )
            )
        else:
            pool.append(InstructionPair(instr, resp, fam))
    return pool


def make_target_set(
    n: int, families: tuple[str, ...] = ("add", "sort"), seed: int = 1
) -> list[InstructionPair]:
    """Clean examples of the target families (validation/test); use a seed disjoint from the pool's."""
    return make_instruction_pool(n, seed=seed, wrong_frac=0.0, filler_frac=0.0, families=families)


def encode_pairs(
    pairs: list[InstructionPair], max_len: int | None = None, instruction: bool = True
) -> dict[str, torch.Tensor]:
    """Byte-level encoding ``"Q: {instruction}\\nA: {response}\\n"``.

    With ``instruction=False`` the prompt is ``"A: "`` alone (the response without its
    instruction: IFD's ``ppl(y)``); the response-token layout is the same.

    Returns ``input_ids [N, L]`` (padded with 0), ``labels [N, L]`` (the next byte, ``-100`` on
    instruction targets and padding), ``token_lengths [N]`` (response bytes + the final newline),
    ``response_start [N]`` (first label position that is a response byte) and ``filler [N, L]``
    (label positions whose target is a planted filler byte). Sequences longer than ``max_len + 1``
    bytes raise ValueError.
    """
    if not pairs:
        raise ValueError("pairs: expected at least one pair")
    rows = []
    for p in pairs:
        prompt = (f"Q: {p.instruction}\nA: " if instruction else "A: ").encode()
        full = prompt + p.response.encode() + b"\n"
        rows.append((full, len(prompt), p))
    L = max(len(r[0]) for r in rows) - 1
    if max_len is not None:
        _check_int(max_len, "max_len", 1)
        if max_len < L:
            raise ValueError(f"max_len: a sequence needs {L} positions, more than {max_len}")
        L = max_len
    N = len(rows)
    input_ids = torch.zeros(N, L, dtype=torch.long)
    labels = torch.full((N, L), -100, dtype=torch.long)
    filler = torch.zeros(N, L, dtype=torch.bool)
    lengths = torch.zeros(N, dtype=torch.long)
    start = torch.zeros(N, dtype=torch.long)
    for i, (full, plen, p) in enumerate(rows):
        ids = torch.tensor(list(full), dtype=torch.long)
        input_ids[i, : len(ids) - 1] = ids[:-1]
        labels[i, plen - 1 : len(ids) - 1] = ids[plen:]
        lengths[i] = len(ids) - plen
        start[i] = plen - 1
        if p.filler_span is not None:
            a, b = p.filler_span
            filler[i, plen - 1 + a : plen - 1 + b] = True
    return {
        "input_ids": input_ids,
        "labels": labels,
        "token_lengths": lengths,
        "response_start": start,
        "filler": filler,
    }
