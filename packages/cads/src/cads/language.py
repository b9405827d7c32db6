"""The language stand-in of the reduced reproduction (spec section 5): the Python standard
library's top-level package families as sources, bits per byte on a held-out family as the target.

Each source is a family (``email``, ``asyncio``, ..., and ``<modules>`` for the single-file
modules); its pool is ``per_source`` random byte windows of ``seq_len + 1`` bytes. The target
family's files are excluded from every source and split, file by file in path order, alternately
into validation (what the solvers and the best-single-source rule see) and test windows. The files
come from the core's ``data.stdlib_files`` (the same files as ``stdlib_corpus``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ._checks import check_int

__all__ = [
    "LANGUAGE_ARMS",
    "ByteLM",
    "LanguageData",
    "bits_per_byte",
    "byte_llama_factory",
    "deploy_language",
    "dsir_language",
    "lm_loss",
    "select_language",
    "stdlib_families",
]

#: The language arms: uniform mixing, size-proportional mixing, the best single source (by
#: validation bits per byte of a short run on each source), DSIR toward the target family's
#: validation text (the ``data-selection`` peer) and CADS-S.
LANGUAGE_ARMS = ("uniform", "size_proportional", "best_single", "dsir", "cads_s")


@dataclass
class LanguageData:
    """``x``/``y`` [n, T] int64 (``y`` = ``x`` shifted by one byte), ``sources`` [n] family ids,
    ``families`` the source names, ``family_bytes`` [S] each family's size in bytes (the
    size-proportional mixture), clean ``val``/``test`` pairs from the ``target`` family."""

    x: torch.Tensor
    y: torch.Tensor
    sources: torch.Tensor
    families: tuple[str, ...]
    family_bytes: torch.Tensor
    target: str
    val: tuple[torch.Tensor, torch.Tensor]
    test: tuple[torch.Tensor, torch.Tensor]

    @property
    def train(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x, self.y


def _family(rel: str) -> str:
    parts = rel.split("/")
    return parts[0] if len(parts) > 1 else "<modules>"


def _windows(data: torch.Tensor, count: int, length: int, gen: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, data.numel() - length, (count,), generator=gen)
    return data[starts[:, None] + torch.arange(length)[None, :]].long()


def stdlib_families(
    target: str = "email",
    per_source: int = 256,
    seq_len: int = 64,
    val_windows: int = 64,
    test_windows: int = 256,
    seed: int = 0,
    root: str | None = None,
) -> LanguageData:
    """Sources = the standard library's package families other than ``target``; see the module."""
    from neurips25_core.data import stdlib_files

    per_source = check_int("per_source", per_source, low=1)
    seq_len = check_int("seq_len", seq_len, low=1)
    val_windows = check_int("val_windows", val_windows, low=1)
    test_windows = check_int("test_windows", test_windows, low=1)
    seed = check_int("seed", seed, low=0)
    import sysconfig
    from pathlib import Path

    base = Path(root) if root is not None else Path(sysconfig.get_paths()["stdlib"])
    by_family: dict[str, list[bytes]] = {}
    for f in stdlib_files(base):
        by_family.setdefault(_family(f.relative_to(base).as_posix()), []).append(
            f.read_bytes() + b"\n"
        )
    if target not in by_family:
        raise ValueError(f"target must be a family of the standard library, got {target!r}")
    target_files = by_family.pop(target)
    if len(target_files) < 2:
        raise ValueError(f"target {target!r} needs at least 2 files (validation and test)")

    def tensor(parts: list[bytes]) -> torch.Tensor:
        return torch.frombuffer(bytearray(b"".join(parts)), dtype=torch.uint8)

    gen = torch.Generator().manual_seed(seed)
    families = tuple(
        sorted(f for f, parts in by_family.items() if sum(map(len, parts)) > seq_len + 1)
    )
    pools, ids, sizes = [], [], []
    for g, fam in enumerate(families):
        data = tensor(by_family[fam])
        pools.append(_windows(data, per_source, seq_len + 1, gen))
        ids.append(torch.full((per_source,), g, dtype=torch.long))
        sizes.append(data.numel())
    windows = torch.cat(pools)
    val = _windows(tensor(target_files[0::2]), val_windows, seq_len + 1, gen)
    test = _windows(tensor(target_files[1::2]), test_windows, seq_len + 1, gen)
    return LanguageData(
        windows[:, :-1].contiguous(),
        windows[:, 1:].contiguous(),
        torch.cat(ids),
        families,
        torch.tensor(sizes, dtype=torch.float64),
        target,
        (val[:, :-1].contiguous(), val[:, 1:].contiguous()),
        (test[:, :-1].contiguous(), test[:, 1:].contiguous()),
    )


class ByteLM(nn.Module):
    """A ``LlamaForCausalLM`` that returns its logits [b, T, 256] (what ``budgeted_train``'s
    ``loss_fn(model(x), y)`` expects)."""

    def __init__(self, llama: nn.Module) -> None:
        super().__init__()
        self.llama = llama

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.llama(x).logits


def lm_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-byte cross-entropy in nats."""
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))


def bits_per_byte(model: nn.Module, data: tuple[torch.Tensor, torch.Tensor]) -> float:
    with torch.no_grad():
        return lm_loss(model(data[0]), data[1]).item() / math.log(2)


def byte_llama_factory(
    seed: int, hidden: int = 64, layers: int = 2, seq_len: int = 64
) -> Callable[[], nn.Module]:
    """A factory of the spec's byte Llama (hidden 64, 2 layers, 4 heads) with the same initial
    weights on every call (``neurips25_core.models.tiny_llama`` forks the global RNG)."""
    from neurips25_core.models import tiny_llama, tiny_llama_config

    seed = check_int("seed", seed, low=0)
    config = tiny_llama_config(
        hidden_size=check_int("hidden", hidden, low=4),
        num_layers=check_int("layers", layers, low=1),
        num_heads=4,
        max_position_embeddings=check_int("seq_len", seq_len, low=1),
    )
    template = ByteLM(tiny_llama(config, seed=seed))

    def build() -> nn.Module:
        return copy.deepcopy(template)

    return build


def deploy_language(
    factory: Callable[[], nn.Module],
    data: LanguageData,
    weights: torch.Tensor,
    steps: int,
    batch_size: int,
    seed: int,
) -> dict[str, float]:
    """Train a fresh model for exactly ``steps`` steps on the source mixture ``weights`` [S]
    (floating point) or on the training windows ``weights`` indexes (int64, the DSIR arm);
    validation and test bits per byte."""
    from .budget import Budget
    from .train import budgeted_train

    model, _ = budgeted_train(
        factory,
        data.train,
        weights.double() if weights.is_floating_point() else weights,
        Budget(steps, batch_size),
        _adamw,
        torch.Generator().manual_seed(seed),
        loss_fn=lm_loss,
        sources=data.sources,
    )
    return {"val_bpb": bits_per_byte(model, data.val), "test_bpb": bits_per_byte(model, data.test)}


def _adamw(params: list) -> torch.optim.Optimizer:
    """The language inner optimizer: AdamW, lr 3e-3 (a byte LM does not train with plain SGD at
    these budgets)."""
    return torch.optim.AdamW(params, lr=3e-3, weight_decay=0.0)


def _window_text(x: torch.Tensor) -> list[str]:
    """Each byte window as text, one character per byte (latin-1: lossless for any byte)."""
    return [bytes(row.tolist()).decode("latin-1") for row in x.to(torch.uint8)]


def dsir_language(
    data: LanguageData, steps: int, batch_size: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """DSIR (``data-selection``'s hashed n-gram importance resampling, through
    :func:`neurips25_core.dsir.dsir_select`) from the training windows toward the target family's
    validation windows. It keeps ``k = min(steps * batch_size, n // 2)`` windows: what the budget
    can see about once, and never more than half the pool (else it is no selection).

    Returns ``(indices [k], log_importance_weights [n])``.

    Raises:
        ImportError: ``data-selection`` (cads's ``peers`` extra) is not installed.
    """
    from neurips25_core.dsir import dsir_select

    steps = check_int("steps", steps, low=1)
    batch_size = check_int("batch_size", batch_size, low=1)
    seed = check_int("seed", seed, low=0)
    n = data.x.shape[0]
    if n < 2:
        raise ValueError(f"data: DSIR needs at least 2 training windows, got {n}")
    k = min(steps * batch_size, n // 2)
    return dsir_select(_window_text(data.x), _window_text(data.val[0]), k, seed=seed)


def select_language(
    arm: str,
    factory: Callable[[], nn.Module],
    data: LanguageData,
    steps: int,
    batch_size: int,
    seed: int,
    outer_steps: int,
    probe_steps: int,
) -> torch.Tensor:
    """Source weights [S] of ``arm`` (``LANGUAGE_ARMS``) at budget ``steps``, or for ``dsir``
    the indices of the windows it keeps (:func:`dsir_language`). ``best_single`` trains
    ``min(steps, probe_steps)`` steps on each source and keeps the one with the lowest
    validation bits per byte."""
    from .budget import Budget
    from .config import CADSConfig
    from .solver import CADS

    if arm not in LANGUAGE_ARMS:
        raise ValueError(f"arm must be one of {LANGUAGE_ARMS}, got {arm!r}")
    steps = check_int("steps", steps, low=1)
    S = len(data.families)
    if arm == "uniform":
        return torch.ones(S, dtype=torch.float64)
    if arm == "size_proportional":
        return data.family_bytes / data.family_bytes.sum()
    if arm == "dsir":
        return dsir_language(data, steps, batch_size, check_int("seed", seed, low=0))[0]
    if arm == "best_single":
        short = min(steps, check_int("probe_steps", probe_steps, low=1))
        scores = []
        for g in range(S):
            onehot = torch.zeros(S, dtype=torch.float64)
            onehot[g] = 1.0
            scores.append(
                deploy_language(factory, data, onehot, short, batch_size, seed)["val_bpb"]
            )
        onehot = torch.zeros(S, dtype=torch.float64)
        onehot[int(torch.tensor(scores).argmin())] = 1.0
        return onehot
    config = CADSConfig(Budget(steps, batch_size), outer_steps=outer_steps, granularity="source")
    sel = CADS(
        factory,
        lm_loss,
        data.train,
        data.val,
        config,
        sources=data.sources,
        optimizer_factory=_adamw,
    ).fit(torch.Generator().manual_seed(check_int("seed", seed, low=0) * 7919 + steps))
    weights = sel.weights.double()
    return weights if weights.sum() > 0 else torch.ones(S, dtype=torch.float64)
