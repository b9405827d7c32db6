"""The reduced reproduction's classification tasks on the standard library's source (offline).

Every example is ``snippet (96 bytes) + SEP`` and its class is one verbalizer byte (spec, section 5):

* ``T1``: package of origin of the snippet, 4-way: ``asyncio``, ``email``, ``json``, ``unittest``
  (verbalizer ``a e j u``).
* ``T2``: is the snippet from a ``test_*.py`` file? (``y``/``n``, balanced).
* ``T3``: line type of the snippet's *last* line (the window ends where that line ends), 3-way from
  :mod:`tokenize`: code, comment (a line holding only a ``COMMENT``), docstring (a line inside a
  string statement that is the first statement of a module, class or function body); verbalizer
  ``c # "``. Classes are balanced.

Splits are by file: a file's bytes are either train or test, never both, decided by a hash of its
relative path (per class, so every class has files on both sides). Training and validation
examples come from the train files with different seeds; the test examples from the test files.
The separator is byte ``0x1E`` (ASCII record separator), which the corpus never contains.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import random
import sysconfig
import tokenize
from pathlib import Path

import torch

__all__ = ["SEP", "SNIPPET", "TASKS", "Task", "make_task", "verbalize"]

SNIPPET = 96
SEP = 0x1E
T1_PACKAGES = ("asyncio", "email", "json", "unittest")
#: Files scanned for T3's line types (a hash-ordered slice of the stdlib: tokenize is slow).
T3_FILES = 120


@dataclasses.dataclass(frozen=True)
class Task:
    """A task: its name, class names and the verbalizer byte of each class."""

    name: str
    classes: tuple[str, ...]
    verbalizer: bytes

    @property
    def label_ids(self) -> torch.Tensor:
        return torch.tensor(list(self.verbalizer))


TASKS = {
    "T1": Task("T1", T1_PACKAGES, b"aeju"),
    "T2": Task("T2", ("test", "other"), b"yn"),
    "T3": Task("T3", ("code", "comment", "docstring"), b'c#"'),
}


def _hash(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2**64


@functools.lru_cache(maxsize=2)
def _files(packages: tuple[str, ...] | None = None) -> tuple[tuple[str, bytes], ...]:
    """``(relative path, bytes)`` of the stdlib files (only under ``packages`` when given: T1
    reads four packages instead of walking the 1,790 files)."""
    from neurips25_core.data import stdlib_files

    base = Path(sysconfig.get_paths()["stdlib"])
    found = (
        [f for pkg in packages for f in stdlib_files(base / pkg)]
        if packages is not None
        else stdlib_files()
    )
    out = []
    for f in sorted(found, key=lambda f: f.relative_to(base).as_posix()):
        data = f.read_bytes()
        if len(data) > SNIPPET and SEP not in data:
            out.append((f.relative_to(base).as_posix(), data))
    return tuple(out)


def _split(paths: list[str]) -> tuple[list[str], list[str]]:
    """Half the files (by path hash, at least one each side) train, the rest test."""
    ordered = sorted(paths, key=_hash)
    cut = max(1, min(len(ordered) - 1, (len(ordered) + 1) // 2))
    return ordered[:cut], ordered[cut:]


def _groups(task: str) -> list[list[str]]:
    """Per class, the relative paths of its files."""
    files = dict(_files(T1_PACKAGES if task == "T1" else None))
    if task == "T1":
        return [[p for p in files if p.split("/")[0] == pkg] for pkg in T1_PACKAGES]
    if task == "T2":
        test = [p for p in files if p.rsplit("/", 1)[-1].startswith("test_")]
        return [test, [p for p in files if not p.rsplit("/", 1)[-1].startswith("test_")]]
    raise ValueError(f"task: {task!r} has no file groups")


def _window(data: bytes, end: int) -> bytes:
    start = end - SNIPPET
    if start < 0:
        return b" " * -start + data[:end]
    return data[start:end]


@functools.lru_cache(maxsize=1)
def _line_types() -> tuple[tuple[str, bytes, tuple[tuple[int, int], ...]], ...]:
    """For T3's files: ``(path, bytes, ((line_end_offset, class), ...))``."""
    files = sorted(_files(), key=lambda pf: _hash("T3:" + pf[0]))[:T3_FILES]
    out = []
    for path, data in files:
        try:
            tokens = list(tokenize.tokenize(io.BytesIO(data).readline))
        except (tokenize.TokenError, SyntaxError, UnicodeDecodeError):
            continue
        lines = data.split(b"\n")
        ends, pos = [], 0
        for line in lines:
            pos += len(line)
            ends.append(pos)  # offset of the line's end (its newline excluded)
            pos += 1
        kind: dict[int, int] = {}
        significant = (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
        prev = tokenize.ENCODING
        prev_op = ""
        for i, tok in enumerate(tokens):
            row = tok.start[0]
            if tok.type == tokenize.COMMENT and tok.line.strip().startswith("#"):
                kind.setdefault(row, 1)
            elif tok.type == tokenize.STRING and prev in significant:
                nxt = tokens[i + 1].type if i + 1 < len(tokens) else tokenize.NEWLINE
                # A docstring: a string statement at the start of a body (after ':' NEWLINE INDENT)
                # or of the module.
                if nxt in (tokenize.NEWLINE, tokenize.ENDMARKER) and prev_op in (":", ""):
                    for r in range(tok.start[0], tok.end[0] + 1):
                        kind[r] = 2
            elif tok.type in (tokenize.NAME, tokenize.NUMBER, tokenize.OP):
                kind.setdefault(row, 0)
            if tok.type not in (tokenize.NL, tokenize.COMMENT):
                if tok.type == tokenize.OP:
                    prev_op = tok.string
                elif tok.type not in significant:
                    prev_op = "x"
                prev = tok.type
        rows = tuple(
            (ends[r - 1], c) for r, c in sorted(kind.items()) if lines[r - 1].strip() and r >= 1
        )
        out.append((path, data, rows))
    return tuple(out)


def _sample_t3(paths: set[str], n: int, rng: random.Random) -> tuple[list[bytes], list[int]]:
    per_class: list[list[tuple[bytes, int]]] = [[], [], []]
    for path, data, rows in _line_types():
        if path in paths:
            for end, c in rows:
                per_class[c].append((data, end))
    xs, ys = [], []
    for i in range(n):
        c = i % 3
        data, end = rng.choice(per_class[c])
        xs.append(_window(data, end))
        ys.append(c)
    return xs, ys


def make_task(
    name: str, n: int, split: str, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, Task]:
    """``n`` balanced examples of task ``name`` from the ``split`` files.

    Args:
        name: ``"T1"``, ``"T2"`` or ``"T3"``.
        n: number of examples (>= 1), classes in turn.
        split: ``"train"`` or ``"test"`` (the files never overlap); draw a validation set from
            ``"train"`` with another ``seed``.
        seed: the sampling seed.

    Returns:
        ``(input_ids [n, 97] int64: snippet + SEP, labels [n] int64 class indices, task)``.

    Example:
        >>> ids, labels, task = make_task("T1", 8, "train")
        >>> ids.shape, int(ids[0, -1]), task.verbalizer
        (torch.Size([8, 97]), 30, b'aeju')
    """
    if name not in TASKS:
        raise ValueError(f"name: expected one of {sorted(TASKS)}, got {name!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected an int >= 1, got {n!r}")
    if split not in ("train", "test"):
        raise ValueError(f"split: expected 'train' or 'test', got {split!r}")
    rng = random.Random(f"{name}:{split}:{seed}")
    side = 0 if split == "train" else 1
    if name == "T3":
        paths = [p for p, _, _ in _line_types()]
        xs, ys = _sample_t3(set(_split(paths)[side]), n, rng)
    else:
        files = dict(_files(T1_PACKAGES if name == "T1" else None))
        groups = [_split(g)[side] for g in _groups(name)]
        xs, ys = [], []
        for i in range(n):
            c = i % len(groups)
            data = files[rng.choice(groups[c])]
            end = rng.randrange(SNIPPET, len(data) + 1)
            xs.append(data[end - SNIPPET : end])
            ys.append(c)
    ids = torch.tensor([[*x, SEP] for x in xs], dtype=torch.long)
    return ids, torch.tensor(ys, dtype=torch.long), TASKS[name]


def verbalize(logits: torch.Tensor, label_token_ids: torch.Tensor) -> torch.Tensor:
    """Class logits ``[B, C]`` from the last position's vocabulary logits ``[B, T, V]`` (or ``[B, V]``).

    Example:
        >>> verbalize(torch.arange(12.0).view(1, 2, 6), torch.tensor([5, 0])).tolist()
        [[11.0, 6.0]]
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() not in (2, 3):
        raise ValueError("logits: expected a tensor [B, T, V] or [B, V]")
    if not isinstance(label_token_ids, torch.Tensor) or label_token_ids.dim() != 1:
        raise ValueError("label_token_ids: expected a 1-D tensor of token ids")
    last = logits[:, -1] if logits.dim() == 3 else logits
    if int(label_token_ids.max()) >= last.shape[-1] or int(label_token_ids.min()) < 0:
        raise ValueError(f"label_token_ids: ids outside the vocabulary of {last.shape[-1]}")
    return last[:, label_token_ids.to(last.device)]
