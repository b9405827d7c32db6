"""The peer a user would try first: DSIR (Xie et al. 2023), from the ``data-selection`` package.

``data-selection`` (PyPI 1.0.3, the ``peers`` extra: ``uv sync --all-packages --extra peers``)
implements hashed n-gram importance resampling: unigram + bigram counts hashed into 10,000
buckets, a bag-of-n-grams model fitted on the raw pool and one on the target data, the log
importance weight ``⟨log p_target − log p_raw, features⟩`` per example, then Gumbel top-k
(sampling without replacement in proportion to the importance weights) or plain top-k.

:func:`dsir_selection` writes each pair as one text (:func:`pair_text`) and calls the core's
:func:`neurips25_core.dsir.dsir_select`, which runs the package the way its README does (local
JSONL files, ``HashedNgramDSIR``, ``compute_importance_weights``, ``resample``; the Gumbel draw
seeded from NumPy's global RNG, whose previous state is restored). ``min_example_length``
defaults to 1 word instead of the package's 100 (an instruction pair here is 3–20 words; 100
would drop every one).
"""

from __future__ import annotations

import torch

from neurips25_core.dsir import dsir_available, dsir_select

from .ops import _check_int
from .tasks import InstructionPair

__all__ = ["dsir_available", "dsir_selection", "pair_text"]

_MISSING = (
    "the DSIR peer needs the `data-selection` package (qcs's `peers` extra): "
    "`uv sync --all-packages --extra peers` or `pip install data-selection==1.0.3`"
)


def pair_text(pair: InstructionPair) -> str:
    """The text DSIR sees for one pair: the instruction, a newline, the response."""
    return f"{pair.instruction}\n{pair.response}"


def _check_pairs(pairs, name: str) -> list[InstructionPair]:
    if not isinstance(pairs, (list, tuple)) or not pairs:
        raise TypeError(f"{name}: expected a non-empty list of InstructionPair")
    bad = [type(p).__name__ for p in pairs if not isinstance(p, InstructionPair)]
    if bad:
        raise TypeError(f"{name}: expected InstructionPair items, got {bad[0]}")
    return list(pairs)


def dsir_selection(
    pool,
    target,
    budget: int,
    *,
    seed: int = 0,
    top_k: bool = False,
    ngrams: int = 2,
    num_buckets: int = 10_000,
    min_example_length: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Select ``budget`` pool pairs toward ``target`` with ``data_selection.HashedNgramDSIR``.

    Args:
        pool: the training pool, a list of :class:`~qcs.tasks.InstructionPair`.
        target: target examples (the few-shot validation set), same form.
        budget: how many pool pairs to keep.
        seed: seeds the Gumbel noise of DSIR's resampling (ignored with ``top_k``).
        top_k: keep the highest importance weights instead of resampling.
        ngrams, num_buckets: DSIR's feature settings (its defaults: 2, 10,000).
        min_example_length: DSIR drops pool examples with fewer words than this.

    Returns:
        ``(indices [budget], log_importance_weights [n])``: sorted pool indices, and DSIR's
        log importance weight of every pool pair.

    Raises:
        ImportError: ``data-selection`` is not installed (names the ``peers`` extra).
    """
    pool = _check_pairs(pool, "pool")
    target = _check_pairs(target, "target")
    _check_int(budget, "budget", 1)
    if budget > len(pool):
        raise ValueError(f"budget: must be <= the pool size {len(pool)}, got {budget}")
    _check_int(ngrams, "ngrams", 1)
    _check_int(num_buckets, "num_buckets", 2)
    _check_int(min_example_length, "min_example_length", 0)
    if not dsir_available():
        raise ImportError(_MISSING)
    return dsir_select(
        [pair_text(p) for p in pool],
        [pair_text(p) for p in target],
        budget,
        seed=seed,
        top_k=top_k,
        ngrams=ngrams,
        num_buckets=num_buckets,
        min_example_length=min_example_length,
    )
