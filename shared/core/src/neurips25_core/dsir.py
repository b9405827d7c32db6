"""DSIR (Xie et al. 2023) over plain texts, through the ``data-selection`` package (PyPI 1.0.3).

``data-selection`` implements hashed n-gram importance resampling: unigram + bigram counts hashed
into 10,000 buckets, a bag-of-n-grams model fitted on the raw pool and one on the target data,
the log importance weight ``<log p_target - log p_raw, features>`` per example, then Gumbel top-k
(sampling without replacement in proportion to the importance weights) or plain top-k.

:func:`dsir_select` calls it the way its README does: the raw and target texts are written as
local JSONL files (``{"text": ..., "idx": ...}``), ``HashedNgramDSIR`` fits on them,
``compute_importance_weights`` scores the pool and ``resample`` writes the chosen lines, whose
``idx`` fields are the selection. The package draws its Gumbel noise from NumPy's legacy global
RNG: it is seeded here and the caller's NumPy RNG state restored afterwards.
``min_example_length`` defaults to 1 word instead of the package's 100 (short examples would
otherwise all be dropped).

``data-selection`` is optional: packages list it in their ``peers`` extra, and
:func:`dsir_available` lets a benchmark skip its DSIR arm with a clear message.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

__all__ = ["MISSING", "dsir_available", "dsir_select"]

#: The ImportError message when ``data-selection`` is absent.
MISSING = (
    "DSIR needs the `data-selection` package (the `peers` extra of the package that runs it): "
    "`uv sync --all-packages --extra peers` or `pip install data-selection==1.0.3`"
)


def dsir_available() -> bool:
    """Whether ``data-selection`` can be imported."""
    try:
        import data_selection  # noqa: F401
    except ImportError:
        return False
    return True


def _texts(texts, name: str) -> list[str]:
    if isinstance(texts, (str, bytes)) or not isinstance(texts, (list, tuple)) or not texts:
        raise TypeError(f"{name}: expected a non-empty list of str")
    bad = [type(t).__name__ for t in texts if not isinstance(t, str)]
    if bad:
        raise TypeError(f"{name}: expected str items, got {bad[0]}")
    return list(texts)


def _int(value, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name}: must be >= {low}, got {value}")
    return value


def dsir_select(
    raw,
    target,
    k: int,
    *,
    seed: int = 0,
    top_k: bool = False,
    ngrams: int = 2,
    num_buckets: int = 10_000,
    min_example_length: int = 1,
):
    """Select ``k`` of the ``raw`` texts toward ``target`` with ``data_selection.HashedNgramDSIR``.

    Args:
        raw: the pool, a non-empty list of str.
        target: target texts (e.g. the validation set of the target domain), a list of str.
        k: how many raw texts to keep (1 <= k <= len(raw)).
        seed: seeds the Gumbel noise of DSIR's resampling (ignored with ``top_k``).
        top_k: keep the highest importance weights instead of resampling.
        ngrams, num_buckets: DSIR's feature settings (its defaults: 2, 10,000).
        min_example_length: DSIR drops raw texts with fewer words than this.

    Returns:
        ``(indices [k] int64, log_importance_weights [len(raw)] float64)`` as torch tensors:
        sorted indices into ``raw``, and DSIR's log importance weight of every raw text.

    Raises:
        TypeError / ValueError: bad input (names the argument).
        ImportError: ``data-selection`` is not installed (:data:`MISSING`).
    """
    raw = _texts(raw, "raw")
    target = _texts(target, "target")
    _int(k, "k", 1)
    if k > len(raw):
        raise ValueError(f"k: must be <= the number of raw texts {len(raw)}, got {k}")
    _int(seed, "seed", 0)
    if not isinstance(top_k, bool):
        raise TypeError(f"top_k: expected a bool, got {type(top_k).__name__}")
    _int(ngrams, "ngrams", 1)
    _int(num_buckets, "num_buckets", 2)
    _int(min_example_length, "min_example_length", 0)
    try:
        import numpy as np
        import torch
        from data_selection import HashedNgramDSIR
    except ImportError as err:
        raise ImportError(MISSING) from err

    with tempfile.TemporaryDirectory(prefix="neurips25-dsir-") as tmp:
        root = Path(tmp)
        raw_path, target_path = root / "raw.jsonl", root / "target.jsonl"
        for path, texts in ((raw_path, raw), (target_path, target)):
            with open(path, "w") as f:
                for i, text in enumerate(texts):
                    f.write(json.dumps({"text": text, "idx": i}) + "\n")
        dsir = HashedNgramDSIR(
            [str(raw_path)],
            [str(target_path)],
            cache_dir=str(root / "cache"),
            num_proc=1,
            ngrams=ngrams,
            num_buckets=num_buckets,
            min_example_length=min_example_length,
        )
        state = np.random.get_state()  # noqa: NPY002
        # the package prints tqdm bars on stderr for every pass; keep benchmark logs readable
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                dsir.fit_importance_estimator(num_tokens_to_fit="all")
                dsir.compute_importance_weights()
                np.random.seed(seed)  # noqa: NPY002
                dsir.resample(
                    out_dir=str(root / "out"),
                    num_to_sample=k,
                    cache_dir=str(root / "resample"),
                    top_k=top_k,
                )
            finally:
                np.random.set_state(state)  # noqa: NPY002
        log_w = np.load(str(root / "cache" / "log_importance_weights" / "0.npy"))
        chosen = [
            int(json.loads(line)["idx"])
            for line in (root / "out" / "0.jsonl").read_text().splitlines()
            if line.strip()
        ]
    return (
        torch.sort(torch.tensor(chosen, dtype=torch.long)).values,
        torch.from_numpy(np.asarray(log_w, dtype=np.float64)),
    )
