"""Prompt training and greedy-decoding evaluation on byte-level data (:mod:`ptmoe.tasks`).

``fit`` trains the trainable parameters of a :class:`~ptmoe.model.PromptTunedModel` (PT-MoE or a
baseline) or a peft model with AdamW, a linear warm-up (3 % by default) and linear decay, the loss
on the answer tokens only; it runs under ``torch.enable_grad`` so an outer ``no_grad`` cannot
switch training off. ``evaluate`` decodes greedily with left padding and scores per domain.
Tokens are bytes (vocabulary 256, the core's tiny Llama); the target is the answer after one space
(``Answer: Paris``, as text is written and as the base's pretraining writes ``A: Paris``; math
answers already start with one) and ends with a newline.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable, Sequence

import torch

from neurips25_core.progress import progress_bar

from .model import PromptTunedModel
from .tasks import QAExample, exact_match, f1_score, math_accuracy

__all__ = ["encode_batch", "evaluate", "fit"]

END = "\n"


def target_text(answer: str) -> str:
    """The bytes a model is trained to write after the source: ``" " + answer + "\\n"`` (no
    second space when the answer starts with whitespace, as the math solutions do)."""
    return (answer if answer[:1].isspace() else " " + answer) + END


def _bytes(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def encode_batch(
    examples: Sequence[QAExample], with_answers: bool = True, left_pad: bool = False
) -> dict[str, torch.Tensor]:
    """Byte ids, attention mask and labels (−100 on the source and padding) for a batch.

    With ``with_answers`` :func:`target_text` follows the source (training, right padding);
    without, only the sources (generation; ``left_pad=True``).
    """
    if not examples:
        raise ValueError("examples: expected at least one example")
    rows, label_rows = [], []
    for ex in examples:
        src = _bytes(ex.source)
        ans = _bytes(target_text(ex.answer)) if with_answers else []
        rows.append(src + ans)
        label_rows.append([-100] * len(src) + ans)
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for i, (r, lab) in enumerate(zip(rows, label_rows)):
        sl = slice(width - len(r), width) if left_pad else slice(0, len(r))
        ids[i, sl] = torch.tensor(r)
        mask[i, sl] = 1
        labels[i, sl] = torch.tensor(lab)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def fit(
    model: torch.nn.Module,
    examples: Sequence[QAExample],
    steps: int,
    lr: float,
    batch_size: int = 16,
    warmup: float = 0.03,
    seed: int = 0,
    progress: bool = True,
) -> list[float]:
    """Train ``model``'s trainable parameters on ``examples``; returns the loss of every step."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected a positive int, got {steps!r}")
    if not lr > 0:
        raise ValueError(f"lr: expected > 0, got {lr!r}")
    if not 0 <= warmup < 1:
        raise ValueError(f"warmup: expected a fraction in [0, 1), got {warmup!r}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model: no trainable parameters")
    warm = max(1, math.ceil(warmup * steps)) if warmup > 0 else 0

    def schedule(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (steps - step) / max(1, steps - warm))

    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    rng = random.Random(seed)
    device = params[0].device
    losses = []
    model.train()
    with torch.enable_grad():
        for _ in progress_bar(range(steps), desc="prompt training", enabled=progress):
            batch = encode_batch(rng.sample(list(examples), min(batch_size, len(examples))))
            loss = model(**{k: v.to(device) for k, v in batch.items()}).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    examples: Sequence[QAExample],
    metric: str = "qa",
    batch_size: int = 32,
    max_new_tokens: int = 16,
) -> dict[str, dict[str, float]]:
    """Greedy-decode every source and score per domain (and ``"all"``).

    Args:
        metric: ``"qa"`` (SQuAD F1 and EM) or ``"math"`` (final-integer accuracy).

    Our wrappers (:class:`~ptmoe.model.PromptTunedModel`) get each row's domain, so their
    :meth:`~ptmoe.model.PromptTunedModel.routing_stats` histogram is per domain.

    Returns:
        ``{domain: {"f1", "em"} or {"accuracy"}, ..., "all": ...}`` as fractions in [0, 1].
    """
    if metric not in ("qa", "math"):
        raise ValueError(f"metric: expected 'qa' or 'math', got {metric!r}")
    model.eval()
    device = next(model.parameters()).device
    scores: dict[str, list[dict[str, float]]] = defaultdict(list)
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        batch = encode_batch(chunk, with_answers=False, left_pad=True)
        # Our wrappers count routing per domain; peft models take no such argument.
        extra = (
            {"domains": [ex.domain for ex in chunk]} if isinstance(model, PromptTunedModel) else {}
        )
        out = model.generate(
            input_ids=batch["input_ids"].to(device),
            attention_mask=batch["attention_mask"].to(device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=0,
            **extra,
        )
        new = out[:, batch["input_ids"].shape[1] :]
        for ex, row in zip(chunk, new.cpu().tolist()):
            text = bytes(b for b in row if 0 <= b < 256).decode("utf-8", "replace")
            text = text.split(END)[0]
            if metric == "qa":
                s = {"f1": f1_score(text, ex.answer), "em": exact_match(text, ex.answer)}
            else:
                s = {"accuracy": math_accuracy(text, ex.answer)}
            scores[ex.domain].append(s)
            scores["all"].append(s)
    mean: Callable[[list[float]], float] = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {d: {k: mean([s[k] for s in v]) for k in v[0]} for d, v in scores.items()}
