"""Quantization-aware training: ``train_qat`` on the core's loop, and ``python -m paretoq.train``.

The official repository trains with ``train.py`` (HF ``Trainer``, AdamW, weight decay 0, cosine
schedule, no warm-up). :func:`train_qat` is that recipe on :func:`neurips25_core.models.train`:
it swaps the linears for :class:`~paretoq.QuantLinear` (unless the model already has them, at the
same bit width), then trains W and α together. Training runs under ``torch.enable_grad()`` (the
core loop's guarantee), so it trains inside ``torch.no_grad()`` and ``torch.inference_mode()``
too.

Example (CPU, a few seconds):

    >>> import torch, paretoq
    >>> from neurips25_core.models import tiny_llama, tiny_llama_config
    >>> model = tiny_llama(tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2))
    >>> ids = torch.randint(0, 256, (4, 33), generator=torch.Generator().manual_seed(0))
    >>> data = lambda step: (ids[:, :-1], ids[:, 1:])  # or a neurips25_core Corpus
    >>> result = paretoq.train_qat(model, data, bits=2, steps=5, progress=False)
    >>> len(result.losses), model.model.layers[0].mlp.up_proj.bits
    (5, 2)
    >>> _ = paretoq.pack_(model)  # int32-packed 2-bit weights for inference

Command line (the core's cached tiny Llama on the stdlib corpus; ``--toy`` for the 30-step one)::

    python -m paretoq.train --bits 2 --steps 180 --out qat-2bit.pt
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from neurips25_core.models import TrainResult, train
from paretoq.modules import PackedLinear, QuantLinear
from paretoq.ops import _check_ternary_alpha_grad, check_bits
from paretoq.quantize import quantize_

__all__ = ["default_lr", "main", "train_qat"]


def default_lr(bits: float) -> float:
    """The peak LR of the package's reduced recipe: 1e-3 at ≤ 2 bits, 5e-4 at 3/4 bits.

    The paper's rule (≤ 2-bit QAT at twice the LR, and 3× the steps, of 3/4-bit), scaled to the
    core's 0.87M-parameter tiny Llama (see the README's QAT table).
    """
    bits = check_bits(bits)
    return 1e-3 if bits <= 2 else 5e-4


def train_qat(
    model: nn.Module,
    data: Any,
    bits: float,
    steps: int = 100,
    lr: float | None = None,
    *,
    weight_decay: float = 0.0,
    batch_size: int = 16,
    seq_len: int = 128,
    grad_clip: float | None = 1.0,
    seed: int = 0,
    ternary_alpha_grad: str = "paretoq",
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
    loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    eval_every: int = 0,
    progress: bool = True,
) -> TrainResult:
    """Quantization-aware training of ``model`` at ``bits`` (in place), the official recipe.

    AdamW (β = 0.9, 0.95) at ``lr``, weight decay 0, no warm-up, cosine decay to 0, on
    :func:`neurips25_core.models.train`.

    Args:
        model: a transformers causal LM (or any module with ``loss_fn``). Its ``nn.Linear`` layers
            (not the head or embeddings) become :class:`~paretoq.QuantLinear` via
            :func:`paretoq.quantize_`, unless it already holds QuantLinear layers at ``bits``.
        data: a :class:`neurips25_core.data.Corpus` or a callable ``step -> (x, y)``.
        bits: 1, 1.58, 2, 3, 4 (16: full-precision training with the same recipe).
        steps: optimizer steps.
        lr: peak learning rate (default :func:`default_lr`).
        weight_decay, batch_size, seq_len, grad_clip, seed, loss_fn, eval_every, progress: as for
            :func:`neurips25_core.models.train`.
        ternary_alpha_grad, filter_fn: as for :func:`paretoq.quantize_`.

    Returns:
        The core's ``TrainResult`` (losses, tokens, seconds, learning rates).

    Raises:
        ValueError: bad ``bits``/``steps``/``lr``; the model is packed (``PackedLinear`` has no
            latent weights to train); it holds QuantLinear layers of another bit width.
    """
    bits = check_bits(bits)
    _check_ternary_alpha_grad(ternary_alpha_grad)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    if any(isinstance(m, PackedLinear) for m in model.modules()):
        raise ValueError(
            "model: holds PackedLinear layers (inference only, no latent weights); train the "
            "QuantLinear model before paretoq.pack_"
        )
    lr = default_lr(bits) if lr is None else lr
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr: expected a finite number > 0, got {lr!r}")
    present = {m.bits for m in model.modules() if isinstance(m, QuantLinear)}
    if present and present != {bits}:
        raise ValueError(
            f"model: already holds QuantLinear layers at bits={sorted(present)}, not bits={bits}"
        )
    if not present and bits < 16:
        # α is created here: outside inference mode, or it could never take part in autograd.
        with torch.inference_mode(False):
            quantize_(model, bits, filter_fn, ternary_alpha_grad=ternary_alpha_grad)

    def adamw(params):
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95))

    label = "1.58" if bits == 1.58 else f"{int(bits)}"
    return train(
        model,
        data,
        steps,
        optimizer=adamw,
        warmup=0,
        min_lr_ratio=0.0,
        batch_size=batch_size,
        seq_len=seq_len,
        grad_clip=grad_clip,
        seed=seed,
        loss_fn=loss_fn,
        progress=progress,
        desc=f"QAT {label}-bit",
        eval_every=eval_every,
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m paretoq.train",
        description="ParetoQ QAT of the core's pretrained tiny Llama on the stdlib byte corpus; "
        "saves the packed (int32) state dict.",
    )
    p.add_argument("--bits", type=float, required=True, help="1, 1.58, 2, 3 or 4")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=None, help="default: 1e-3 at <=2 bits, else 5e-4")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-batches", type=int, default=10)
    p.add_argument("--toy", action="store_true", help="start from the 30-step toy model (smoke)")
    p.add_argument("--out", default=None, help="write {'state_dict', 'config', 'bits', ...} here")
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m paretoq.train``: pretrained tiny Llama → QAT → pack → (optionally) save."""
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import evaluate_bpb, pretrained_tiny_llama_for
    from paretoq.quantize import model_size_bits, pack_

    args = _parser().parse_args(argv)
    bits = check_bits(int(args.bits) if float(args.bits).is_integer() else args.bits)
    if bits >= 16:
        raise SystemExit("--bits: expected 1, 1.58, 2, 3 or 4")
    corpus = stdlib_corpus()
    model = pretrained_tiny_llama_for(
        "smoke" if args.toy else "quick", progress=not args.no_progress
    )
    seq_len = min(args.seq_len, model.config.max_position_embeddings)
    fp = evaluate_bpb(model, corpus, num_batches=args.eval_batches, seq_len=seq_len)
    quantize_(model, bits)
    ptq = evaluate_bpb(model, corpus, num_batches=args.eval_batches, seq_len=seq_len)
    res = train_qat(
        model, corpus, bits, args.steps, args.lr, batch_size=args.batch_size, seq_len=seq_len,
        seed=args.seed, progress=not args.no_progress,
    )  # fmt: skip
    qat = evaluate_bpb(model, corpus, num_batches=args.eval_batches, seq_len=seq_len)
    pack_(model, backend="torch")
    packed = evaluate_bpb(model, corpus, num_batches=args.eval_batches, seq_len=seq_len)
    summary = {
        "bits": bits,
        "steps": args.steps,
        "lr": args.lr if args.lr is not None else default_lr(bits),
        "fp_bpb": fp,
        "ptq_bpb": ptq,
        "qat_bpb": qat,
        "packed_bpb": packed,
        "size_MB": model_size_bits(model) / 8e6,
        "train_seconds": res.seconds,
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        torch.save(
            {"state_dict": model.state_dict(), "config": model.config.to_dict(), **summary},
            args.out,
        )
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
