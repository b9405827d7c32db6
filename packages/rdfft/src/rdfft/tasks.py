"""The reduced NLU-like task: which stdlib package a 256-byte snippet comes from.

Classes are top-level standard-library packages (``email``, ``json``, ``asyncio``, ``unittest``).
Files are split into train and test by a hash of their path (held-out files for test, at least
one per class), so a test snippet never comes from a file seen in fine-tuning. (The pretrained
tiny Llama did see most of these files as language-modelling text.)

Example (CPU):

    >>> from rdfft.tasks import snippet_task
    >>> task = snippet_task()
    >>> x, y = task.batch("train", 8, seed=0)
    >>> x.shape, y.shape, task.num_classes
    (torch.Size([8, 256]), torch.Size([8]), 4)
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import sysconfig
from pathlib import Path

import torch

from neurips25_core.data import stdlib_files

__all__ = ["PACKAGES", "SnippetTask", "snippet_task"]

PACKAGES = ("email", "json", "asyncio", "unittest")


@dataclasses.dataclass(frozen=True)
class SnippetTask:
    """Per split and class, the concatenated bytes of that class's files."""

    train: tuple[torch.Tensor, ...]
    test: tuple[torch.Tensor, ...]
    test_files: tuple[tuple[str, ...], ...]
    length: int
    packages: tuple[str, ...]

    @property
    def num_classes(self) -> int:
        return len(self.packages)

    def batch(
        self, split: str, batch_size: int, seed: int | None = None, generator=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Balanced random snippets: x (B, length) int64 bytes, y (B,) class ids."""
        data = {"train": self.train, "test": self.test}.get(split)
        if data is None:
            raise ValueError(f"split: expected 'train' or 'test', got {split!r}")
        g = generator if generator is not None else torch.Generator().manual_seed(seed or 0)
        y = torch.randint(0, self.num_classes, (batch_size,), generator=g)
        rows = []
        for label in y.tolist():
            src = data[label]
            start = int(torch.randint(0, src.numel() - self.length, (1,), generator=g))
            rows.append(src[start : start + self.length])
        return torch.stack(rows).long(), y


@functools.lru_cache(maxsize=4)
def snippet_task(
    length: int = 256, test_fraction: float = 0.25, packages: tuple[str, ...] = PACKAGES
) -> SnippetTask:
    """Build the task from the running interpreter's standard library.

    Args:
        length: bytes per snippet.
        test_fraction: fraction of each class's files held out (by hash of the path; >= 1 file).
        packages: the top-level stdlib packages that are the classes.
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction: expected a value in (0, 1), got {test_fraction}")
    base = Path(sysconfig.get_paths()["stdlib"])
    by_class: dict[str, list[Path]] = {p: [] for p in packages}
    for f in stdlib_files(base):
        top = f.relative_to(base).parts[0]
        if top in by_class:
            by_class[top].append(f)
    train, test, test_names = [], [], []
    for pkg in packages:
        files = by_class[pkg]
        if len(files) < 2:
            raise ValueError(f"packages: {pkg!r} has {len(files)} .py files; need at least 2")

        def score(f: Path) -> float:
            rel = f.relative_to(base).as_posix()
            return int.from_bytes(hashlib.sha256(rel.encode()).digest()[:8], "big") / 2**64

        ranked = sorted(files, key=score)
        n_test = max(1, round(test_fraction * len(files)))
        held, kept = ranked[:n_test], ranked[n_test:]
        for split, group in ((test, held), (train, kept)):
            blob = b"\n".join(f.read_bytes() for f in group)
            split.append(torch.frombuffer(bytearray(blob), dtype=torch.uint8))
        test_names.append(tuple(f.relative_to(base).as_posix() for f in held))
    return SnippetTask(tuple(train), tuple(test), tuple(test_names), length, tuple(packages))
