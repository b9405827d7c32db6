"""The continuation predictor: will this conversation get another user turn? (paper §3.2)

Input: the current and up to four previous user messages, each trimmed to ``word_budget // n``
words (a longer one keeps its first and last halves joined by ``" ... "``), joined by
``"\\nThe next user query is: "`` and prefixed ``"query: "`` (:func:`build_predictor_text`); the
text is embedded (:class:`HashingTextEncoder` by default, any ``list[str] -> (n, d)`` callable
otherwise) and the 0-based turn index is appended as a raw float. A three-layer MLP
(:class:`ContinuationMLP`) outputs two logits; ``p = softmax[1]``.

    >>> import numpy as np, torch
    >>> from lpc.predictor import (
    ...     HashingTextEncoder,
    ...     ContinuationMLP,
    ...     Predictor,
    ...     build_predictor_text,
    ... )
    >>> build_predictor_text(["a b c d e f"], word_budget=4)
    'query: a b ... e f'
    >>> enc = HashingTextEncoder(dim=16)
    >>> pred = Predictor(enc, ContinuationMLP(in_dim=17, hidden=8).eval(), prior=0.7)
    >>> p = pred.predict([["hello there"], ["thanks, that's all"]], turns=[0, 3])
    >>> p.shape, bool(((p > 0) & (p < 1)).all())
    ((2,), True)
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

__all__ = [
    "JOIN",
    "ContinuationMLP",
    "HashingTextEncoder",
    "Predictor",
    "TrainReport",
    "TurnOnlyPredictor",
    "build_predictor_text",
    "classification_metrics",
    "request_features",
    "train_predictor",
]

JOIN = "\nThe next user query is: "


def _trim(words: list[str], budget: int) -> str:
    if len(words) <= budget:
        return " ".join(words)
    head = budget // 2
    tail = budget - head
    left = " ".join(words[:head])
    right = " ".join(words[len(words) - tail :]) if tail else ""
    return f"{left} ... {right}".strip()


def build_predictor_text(
    user_msgs: Sequence[str], max_msgs: int = 5, word_budget: int = 512
) -> str:
    """The predictor's input text from a conversation's user messages (oldest first).

    The last ``n = min(max_msgs, len(user_msgs))`` messages each keep at most ``word_budget // n``
    whitespace-separated words; a longer message keeps its first ``budget // 2`` and last
    ``budget - budget // 2`` words joined by ``" ... "``. Messages are joined by
    ``"\\nThe next user query is: "`` and the whole is prefixed ``"query: "`` (e5's convention).
    """
    if isinstance(user_msgs, str) or not isinstance(user_msgs, Sequence):
        raise TypeError(f"user_msgs: expected a sequence of str, got {type(user_msgs).__name__}")
    if not user_msgs:
        raise ValueError("user_msgs: expected at least one message")
    for name, v in (("max_msgs", max_msgs), ("word_budget", word_budget)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
    msgs = list(user_msgs)[-max_msgs:]
    for m in msgs:
        if not isinstance(m, str):
            raise TypeError(f"user_msgs: expected str messages, got {type(m).__name__}")
    budget = max(word_budget // len(msgs), 1)
    return "query: " + JOIN.join(_trim(m.split(), budget) for m in msgs)


class HashingTextEncoder:
    """Signed feature hashing of word 1-2-grams and character 3-5-grams, L2-normalised.

    Built on scikit-learn's ``HashingVectorizer`` (stateless, no vocabulary, no download): the two
    analyzers hash into the same ``dim`` buckets, their sum is L2-normalised. A stand-in for the
    paper's frozen e5-small encoder (384-d), which needs a download.

    Args:
        dim: output width (>= 1).
    """

    def __init__(self, dim: int = 384):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim: expected an int >= 1, got {dim!r}")
        from sklearn.feature_extraction.text import HashingVectorizer

        self.dim = dim
        self._words = HashingVectorizer(
            n_features=dim, ngram_range=(1, 2), alternate_sign=True, norm=None, lowercase=True
        )
        self._chars = HashingVectorizer(
            n_features=dim,
            analyzer="char_wb",
            ngram_range=(3, 5),
            alternate_sign=True,
            norm=None,
            lowercase=True,
        )

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32 embeddings."""
        if isinstance(texts, str):
            raise TypeError("texts: expected a list of str, got one str")
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        x = (self._words.transform(texts) + self._char_counts(texts)).toarray()
        norm = np.linalg.norm(x, axis=1, keepdims=True)
        return (x / np.maximum(norm, 1e-12)).astype(np.float32)

    def _char_counts(self, texts: list[str]):
        """``HashingVectorizer(analyzer="char_wb")`` of ``texts``, computed once per distinct word.

        ``char_wb`` n-grams never cross whitespace, so a text's hashed counts are the sum of its
        words' (exactly; a test checks it): a words-by-buckets matrix times word counts.
        """
        import scipy.sparse as sp

        vocab: dict[str, int] = {}
        rows, cols = [], []
        for i, t in enumerate(texts):
            for w in t.lower().split():
                j = vocab.setdefault(w, len(vocab))
                rows.append(i)
                cols.append(j)
        counts = sp.csr_matrix(
            (np.ones(len(rows), np.float64), (rows, cols)), shape=(len(texts), max(len(vocab), 1))
        )
        if not vocab:
            return sp.csr_matrix((len(texts), self.dim))
        per_word = self._chars.transform(list(vocab))
        return counts @ per_word


class ContinuationMLP(nn.Module):
    """``num_layers`` Linear layers: (Linear-BatchNorm-ReLU-Dropout) x (num_layers-1), Linear(., 2).

    Args:
        in_dim: feature width (embedding + 1 for the turn index; 385 for e5-small).
        hidden: hidden width.
        num_layers: number of Linear layers (>= 2).
        dropout: dropout probability after each hidden block.
    """

    def __init__(
        self, in_dim: int = 385, hidden: int = 128, num_layers: int = 3, dropout: float = 0.3
    ):
        super().__init__()
        for name, v, lo in (
            ("in_dim", in_dim, 1),
            ("hidden", hidden, 1),
            ("num_layers", num_layers, 2),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name}: expected an int >= {lo}, got {v!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout: expected a probability in [0, 1), got {dropout!r}")
        self.in_dim = in_dim
        layers: list[nn.Module] = []
        width = in_dim
        for _ in range(num_layers - 1):
            layers += [
                nn.Linear(width, hidden),
                nn.BatchNorm1d(hidden),
                nn.ReLU(),
                nn.Dropout(dropout),
            ]
            width = hidden
        layers.append(nn.Linear(width, 2))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(n, in_dim)`` features -> ``(n, 2)`` logits (class 1 = the conversation continues)."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
        if x.ndim != 2 or x.shape[1] != self.in_dim:
            raise ValueError(
                f"x: expected features of shape (n, {self.in_dim}), got {tuple(x.shape)}"
            )
        return self.net(x)


def request_features(
    encoder: Callable, requests, max_msgs: int = 5, word_budget: int = 512
) -> np.ndarray:
    """``[encoder(text) || turn]`` for every request: ``(n, d + 1)`` float32."""
    requests = list(requests)
    texts = [build_predictor_text(r.user_texts, max_msgs, word_budget) for r in requests]
    turns = np.array([r.turn for r in requests], dtype=np.float32)
    return _features(encoder, texts, turns)


def _features(encoder, texts, turns) -> np.ndarray:
    emb = np.asarray(encoder(texts), dtype=np.float32)
    if emb.ndim != 2 or emb.shape[0] != len(texts):
        raise ValueError(f"encoder: expected an array of shape ({len(texts)}, d), got {emb.shape}")
    return np.concatenate([emb, np.asarray(turns, np.float32)[:, None]], axis=1)


def classification_metrics(labels, p, threshold: float = 0.5) -> dict[str, float]:
    """MCC, macro-F1, accuracy (at ``threshold``) and ROC-AUC (scikit-learn)."""
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef, roc_auc_score

    y = np.asarray(labels).astype(int)
    p = np.asarray(p, dtype=np.float64)
    yhat = (p >= threshold).astype(int)
    auc = float(roc_auc_score(y, p)) if 0 < y.sum() < len(y) else float("nan")
    return {
        "mcc": float(matthews_corrcoef(y, yhat)),
        "macro_f1": float(f1_score(y, yhat, average="macro", zero_division=0)),
        "accuracy": float(accuracy_score(y, yhat)),
        "auc": auc,
        "positive_rate": float(y.mean()),
    }


@dataclasses.dataclass
class Predictor:
    """A trained continuation predictor: ``encoder`` + ``model`` (+ the prior for missing inputs).

    ``predict(texts, turns)`` takes predictor texts (:func:`build_predictor_text`) or lists of user
    messages (built here) and 0-based turn indices, and returns ``p`` (float64, shape (n,)).
    """

    encoder: Callable
    model: ContinuationMLP
    prior: float = 0.5
    max_msgs: int = 5
    word_budget: int = 512
    batch_size: int = 4096

    def predict_features(self, features) -> np.ndarray:
        x = torch.as_tensor(np.asarray(features, dtype=np.float32))
        if x.ndim != 2 or x.shape[1] != self.model.in_dim:
            raise ValueError(
                f"features: expected shape (n, {self.model.in_dim}), got {tuple(x.shape)}"
            )
        self.model.eval()
        out = []
        with torch.no_grad():
            for i in range(0, len(x), self.batch_size):
                out.append(
                    torch.softmax(self.model(x[i : i + self.batch_size]).double(), dim=1)[:, 1]
                )
        return torch.cat(out).numpy() if out else np.zeros(0)

    def predict(self, texts, turns) -> np.ndarray:
        texts = list(texts)
        turns = np.asarray(turns, dtype=np.float32)
        if turns.shape != (len(texts),):
            raise ValueError(f"turns: expected shape ({len(texts)},), got {turns.shape}")
        built = [
            t if isinstance(t, str) else build_predictor_text(t, self.max_msgs, self.word_budget)
            for t in texts
        ]
        return self.predict_features(_features(self.encoder, built, turns))

    def predict_requests(self, requests) -> np.ndarray:
        """``p`` for every request (batched), as :class:`lpc.policy.LPCPolicy` asks for it."""
        requests = list(requests)
        return self.predict([r.user_texts for r in requests], [r.turn for r in requests])


@dataclasses.dataclass
class TurnOnlyPredictor:
    """The turn-only baseline: the training set's continuation rate at each turn index.

    The Bayes-optimal predictor from the turn alone (turns past the last seen one share its rate).
    """

    rates: np.ndarray
    prior: float

    @classmethod
    def fit(cls, turns, labels) -> TurnOnlyPredictor:
        turns = np.asarray(turns, dtype=np.int64)
        y = np.asarray(labels, dtype=np.float64)
        n = int(turns.max()) + 1
        count = np.bincount(turns, minlength=n)
        pos = np.bincount(turns, weights=y, minlength=n)
        prior = float(y.mean())
        rates = np.where(count > 0, (pos + prior) / (count + 1.0), prior)  # one pseudo-count
        return cls(rates, prior)

    def predict(self, texts, turns) -> np.ndarray:
        t = np.clip(np.asarray(turns, dtype=np.int64), 0, len(self.rates) - 1)
        return self.rates[t].astype(np.float64)

    def predict_requests(self, requests) -> np.ndarray:
        requests = list(requests)
        return self.predict(None, [r.turn for r in requests])


@dataclasses.dataclass
class TrainReport:
    """What :func:`train_predictor` did: the chosen epoch and its validation metrics."""

    best_epoch: int
    best_macro_f1: float
    val_metrics: dict[str, float]
    history: list[dict[str, float]]
    seconds: float


def train_predictor(
    features,
    labels,
    *,
    hidden: int = 128,
    num_layers: int = 3,
    dropout: float = 0.3,
    lr: float = 1e-4,
    batch_size: int = 256,
    epochs: int = 50,
    val_fraction: float = 0.1,
    seed: int = 0,
    progress: bool = False,
) -> tuple[ContinuationMLP, TrainReport]:
    """Train :class:`ContinuationMLP` with Adam and cross-entropy; keep the best macro-F1 epoch.

    As the authors' code: Adam (lr 1e-4), batch 256, a stratified holdout (``val_fraction``; the
    code uses 1 % of 100k conversations per dataset, more is needed at our size), the state of the
    epoch with the best holdout macro-F1 is returned. Seeded: the same inputs and seed give the
    same weights. Runs under ``torch.enable_grad()``.

    Args:
        features: ``(n, d)`` float array (embedding || turn).
        labels: ``(n,)`` 0/1 (1 = the conversation continues).
    """
    from sklearn.model_selection import train_test_split

    x = np.asarray(features, dtype=np.float32)
    y = np.asarray(labels)
    if x.ndim != 2:
        raise ValueError(f"features: expected a 2-D array (n, d), got shape {x.shape}")
    if y.shape != (x.shape[0],):
        raise ValueError(f"labels: expected shape ({x.shape[0]},), got {y.shape}")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("labels: expected 0/1 values")
    y = y.astype(np.int64)
    if len(np.unique(y)) < 2:
        raise ValueError("labels: expected both classes")
    for name, v in (("epochs", epochs), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction: expected a fraction in (0, 1), got {val_fraction!r}")
    if not lr > 0:
        raise ValueError(f"lr: expected > 0, got {lr!r}")
    t0 = time.perf_counter()
    idx_tr, idx_va = train_test_split(
        np.arange(len(y)), test_size=val_fraction, stratify=y, random_state=seed
    )
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = ContinuationMLP(x.shape[1], hidden, num_layers, dropout)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    xt, yt = torch.from_numpy(x[idx_tr]), torch.from_numpy(y[idx_tr])
    xv = torch.from_numpy(x[idx_va])
    best = (-1.0, -1, None, {})
    history = []
    bar = None
    if progress:
        from neurips25_core.progress import progress_bar

        bar = progress_bar(total=epochs, desc="train predictor")
    from neurips25_core.bench import num_threads

    # one thread: a 256 x 385 MLP step is too small to gain from a second (shared) core
    with torch.enable_grad(), num_threads(1):
        for epoch in range(epochs):
            model.train()
            perm = torch.randperm(len(xt), generator=gen)
            total = 0.0
            for i in range(0, len(perm), batch_size):
                b = perm[i : i + batch_size]
                if len(b) < 2:  # BatchNorm needs two samples
                    continue
                loss = nn.functional.cross_entropy(model(xt[b]), yt[b])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(b)
            model.eval()
            with torch.no_grad():
                pv = torch.softmax(model(xv), dim=1)[:, 1].numpy()
            m = classification_metrics(y[idx_va], pv)
            history.append({"epoch": epoch, "loss": total / len(xt), **m})
            if m["macro_f1"] > best[0]:
                best = (m["macro_f1"], epoch, copy.deepcopy(model.state_dict()), m)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    model.load_state_dict(best[2])
    model.eval()
    report = TrainReport(best[1], best[0], best[3], history, time.perf_counter() - t0)
    return model, report
