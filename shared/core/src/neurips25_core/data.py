"""Offline data: the Python standard library's own source as a byte-level text corpus.

No network is reachable at run time, so the corpus every package trains its tiny models on is the
standard library of the running interpreter: every ``.py`` file under ``sysconfig``'s ``stdlib``
path, excluding ``site-packages``/``dist-packages`` (third-party code). Bytes are the tokens
(vocabulary 256), so bits per byte is the natural metric and no tokenizer is needed.

Size (CPython 3.11.7 here): 1,790 files, 31.5 MB; with the default ``val_fraction=0.05`` about
1.6 MB is validation. Files are assigned to train or validation by a hash of their relative path,
so the split is deterministic, does not depend on file order, and never splits a file.

Example (CPU):

    >>> from neurips25_core.data import stdlib_corpus
    >>> corpus = stdlib_corpus()
    >>> x, y = corpus.get_batch("train", batch_size=4, seq_len=64)
    >>> x.shape, y.shape
    (torch.Size([4, 64]), torch.Size([4, 64]))
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

__all__ = ["Corpus", "stdlib_corpus", "stdlib_files"]

_EXCLUDED_PARTS = {"site-packages", "dist-packages", "__pycache__"}


def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """The standard library's ``.py`` files (sorted by relative path), third-party code excluded."""
    base = Path(root) if root is not None else Path(sysconfig.get_paths()["stdlib"])
    if not base.is_dir():
        raise FileNotFoundError(f"root: the standard library directory {base} does not exist")
    files = [
        f
        for f in base.rglob("*.py")
        if not (_EXCLUDED_PARTS & set(f.relative_to(base).parts)) and f.is_file()
    ]
    return sorted(files, key=lambda f: f.relative_to(base).as_posix())


def _is_validation(rel_path: str, val_fraction: float, seed: int) -> bool:
    digest = hashlib.sha256(f"{seed}:{rel_path}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < val_fraction


@dataclasses.dataclass(frozen=True)
class Corpus:
    """A byte-level corpus with a file-level train/validation split.

    Attributes:
        train: 1-D ``torch.uint8`` tensor, the training files concatenated (each followed by ``\\n``).
        val: 1-D ``torch.uint8`` tensor, the validation files.
        train_files: relative paths of the training files.
        val_files: relative paths of the validation files.
        fingerprint: a short hash of the file list, sizes and split parameters (cache keys use it).
    """

    train: torch.Tensor
    val: torch.Tensor
    train_files: tuple[str, ...]
    val_files: tuple[str, ...]
    fingerprint: str
    vocab_size: int = 256

    def split(self, split: str) -> torch.Tensor:
        if split == "train":
            return self.train
        if split in ("val", "validation"):
            return self.val
        raise ValueError(f"split: expected 'train' or 'val', got {split!r}")

    def get_batch(
        self,
        split: str,
        batch_size: int,
        seq_len: int,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random windows: ``x`` (B, T) int64 bytes and ``y`` the next bytes (``x`` shifted by one)."""
        if batch_size < 1:
            raise ValueError(f"batch_size: expected >= 1, got {batch_size}")
        if seq_len < 1:
            raise ValueError(f"seq_len: expected >= 1, got {seq_len}")
        data = self.split(split)
        if data.numel() <= seq_len + 1:
            raise ValueError(
                f"seq_len: {seq_len} too long for the {split} split of {data.numel()} bytes"
            )
        starts = torch.randint(0, data.numel() - seq_len - 1, (batch_size,), generator=generator)
        idx = starts[:, None] + torch.arange(seq_len + 1)[None, :]
        window = data[idx].long()
        return window[:, :-1].contiguous(), window[:, 1:].contiguous()

    def batches(
        self,
        split: str,
        batch_size: int,
        seq_len: int,
        seed: int = 0,
        num_batches: int | None = None,
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """An iterator of seeded random batches (endless when ``num_batches`` is None)."""
        g = torch.Generator().manual_seed(seed)
        i = 0
        while num_batches is None or i < num_batches:
            yield self.get_batch(split, batch_size, seq_len, generator=g)
            i += 1

    def __repr__(self) -> str:
        return (
            f"Corpus(train={self.train.numel():,} bytes in {len(self.train_files)} files, "
            f"val={self.val.numel():,} bytes in {len(self.val_files)} files, fingerprint={self.fingerprint})"
        )


@functools.lru_cache(maxsize=4)
def stdlib_corpus(val_fraction: float = 0.05, seed: int = 0, root: str | None = None) -> Corpus:
    """The Python standard library's ``.py`` files as a byte-level corpus (vocab 256).

    Args:
        val_fraction: fraction of files (by hash of path) held out for validation, in (0, 1).
        seed: changes which files are held out.
        root: the standard library directory (default: the running interpreter's).

    Returns:
        A :class:`Corpus` (cached per argument set within the process).
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction: expected a value in (0, 1), got {val_fraction}")
    base = Path(root) if root is not None else Path(sysconfig.get_paths()["stdlib"])
    files = stdlib_files(base)
    train_parts: list[bytes] = []
    val_parts: list[bytes] = []
    train_names: list[str] = []
    val_names: list[str] = []
    h = hashlib.sha256(f"v1:{val_fraction}:{seed}".encode())
    for f in files:
        rel = f.relative_to(base).as_posix()
        content = f.read_bytes() + b"\n"
        h.update(f"{rel}:{len(content)};".encode())
        if _is_validation(rel, val_fraction, seed):
            val_parts.append(content)
            val_names.append(rel)
        else:
            train_parts.append(content)
            train_names.append(rel)
    if not train_parts or not val_parts:
        raise ValueError(
            f"val_fraction: {val_fraction} leaves an empty split over {len(files)} files"
        )

    def to_tensor(parts: list[bytes]) -> torch.Tensor:
        return torch.from_numpy(np.frombuffer(b"".join(parts), dtype=np.uint8).copy())

    return Corpus(
        train=to_tensor(train_parts),
        val=to_tensor(val_parts),
        train_files=tuple(train_names),
        val_files=tuple(val_names),
        fingerprint=h.hexdigest()[:16],
    )
