"""The reduced reproduction's two tasks.

Task A (:func:`lm_loss`, :func:`evaluate_lm`): language-model adaptation of the pretrained tiny
OPT to the families held out of its pretraining (``email/``, ``json/``;
:func:`dizo.models.held_out_corpus`), trained on random windows of the family's training files
and scored in bits per byte on seeded windows of its validation files (the core's
:func:`~neurips25_core.models.evaluate_bpb`).

Task B: which stdlib package does a 64-byte snippet come from?

Snippets of ``asyncio/`` and ``email/`` source files (real offline data), split by file (train
files and eval files are disjoint), formatted as ``snippet + "\\n#"`` and scored, like MeZO's
``train_as_classification``, by the LM's logits for the two label bytes ``a`` / ``e`` at the last
position (cross-entropy over the two candidates; accuracy = which label is more likely).
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import torch
import torch.nn.functional as F

from neurips25_core.data import stdlib_files

FAMILIES = ("asyncio/", "email/")
LABELS = (ord("a"), ord("e"))
SNIPPET = 64


def lm_loss(model, batch) -> torch.Tensor:
    """Task A's loss: mean next-byte cross-entropy (nats) of ``batch = (x, y)``, each (B, T)."""
    from neurips25_core.models import causal_lm_loss

    x, y = batch
    return causal_lm_loss(model, x, y)


@torch.no_grad()
def evaluate_lm(model, corpus, seq_len: int, num_batches: int, batch_size: int = 16) -> float:
    """Task A's metric: validation bits per byte on the same seeded windows every call."""
    from neurips25_core.models import evaluate_bpb

    return evaluate_bpb(
        model, corpus, "val", batch_size=batch_size, seq_len=seq_len, num_batches=num_batches
    )


def _files(family: str) -> list[bytes]:
    # walk only the family's directory (the whole stdlib walk costs ~0.7 s of CPU a family)
    root = Path(sysconfig.get_paths()["stdlib"]) / family.rstrip("/")
    return [p.read_bytes() for p in stdlib_files(root)]


def snippet_task(n_train: int = 512, n_eval: int = 1000, seed: int = 0):
    """``(train, eval)``, each ``(x (N, 66) int64, y (N,) int64 in {0, 1})``, balanced classes."""
    g = torch.Generator().manual_seed(seed)
    splits = {"train": ([], []), "eval": ([], [])}
    for label, fam in enumerate(FAMILIES):
        files = [f for f in _files(fam) if len(f) > SNIPPET + 1]
        order = torch.randperm(len(files), generator=g).tolist()
        cut = max(1, len(files) // 2)
        for split, idx, n in (
            ("train", order[:cut], n_train // 2),
            ("eval", order[cut:], n_eval // 2),
        ):
            for _ in range(n):
                f = files[idx[int(torch.randint(len(idx), (1,), generator=g))]]
                s = int(torch.randint(0, len(f) - SNIPPET, (1,), generator=g))
                splits[split][0].append([*list(f[s : s + SNIPPET]), 10, ord("#")])
                splits[split][1].append(label)
    return tuple(
        (torch.tensor(xs, dtype=torch.long), torch.tensor(ys, dtype=torch.long))
        for xs, ys in splits.values()
    )


def label_logits(model, x: torch.Tensor) -> torch.Tensor:
    return model(input_ids=x).logits[:, -1, list(LABELS)].float()


def classification_loss(model, batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(label_logits(model, x), y)


@torch.no_grad()
def evaluate(model, data, batch_size: int = 250) -> tuple[float, float]:
    """``(mean loss, accuracy)`` on ``data``."""
    was = model.training
    model.eval()
    x, y = data
    losses, correct = [], 0
    for i in range(0, len(y), batch_size):
        lg = label_logits(model, x[i : i + batch_size])
        losses.append(F.cross_entropy(lg, y[i : i + batch_size], reduction="sum"))
        correct += int((lg.argmax(-1) == y[i : i + batch_size]).sum())
    model.train(was)
    return float(sum(losses)) / len(y), correct / len(y)
