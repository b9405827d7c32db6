"""Model-based score producers of the baselines (what :mod:`qcs.baselines`' rules select from).

* :func:`mean_response_losses`: each sequence's mean response loss under a model — perplexity
  filtering's input (``log ppl``), under the base model.
* :func:`ifd_losses`: ``(ℓ̄(y|x), ℓ̄(y))`` per sequence, the inputs of :func:`~qcs.baselines.ifd_scores`;
  ``ℓ̄(y)`` scores the response after the bare ``"A: "`` prompt (no instruction).
* :func:`rho1_reference_model`: RHO-1's reference model, the base model LoRA-tuned on the target
  validation data (r = 8 on q/v, uniform weights), merged into a plain copy.
* :func:`rho1_losses`: per-response-token losses of the training model and the reference in the
  policy's ``[n, T]`` layout, plus the real-token mask: the inputs of
  :func:`~qcs.baselines.rho1_token_mask`, whose output is directly a ``train_fn`` weight mask.

All run under ``no_grad`` in eval mode and restore the model's mode. LESS gradient features are
in :mod:`qcs.less`.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from .ops import _check_int
from .rollouts import LoRARollouts, as_encoding, response_token_losses
from .tasks import encode_pairs

__all__ = [
    "ifd_losses",
    "mean_response_losses",
    "response_layout",
    "rho1_losses",
    "rho1_reference_model",
]


def response_layout(loss: torch.Tensor, data) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather label-position values ``[N, L]`` into the response layout ``[N, T_max]`` + real mask."""
    enc = as_encoding(data)
    start, lengths = enc["response_start"], enc["token_lengths"]
    if loss.shape != enc["labels"].shape:
        raise ValueError(
            f"loss: shape {tuple(loss.shape)} differs from the labels' {tuple(enc['labels'].shape)}"
        )
    T = int(lengths.max())
    j = torch.arange(T)
    real = j[None, :] < lengths[:, None]
    pos = torch.where(real, start[:, None] + j[None, :], torch.zeros_like(j)[None, :])
    return torch.where(real, loss.gather(1, pos), torch.zeros((), dtype=loss.dtype)), real


def mean_response_losses(model: nn.Module, data, batch_size: int = 64) -> torch.Tensor:
    """Mean response-token loss of each sequence ``[N]`` (nats per byte)."""
    enc = as_encoding(data)
    loss = response_token_losses(model, enc, batch_size)
    return loss.sum(1) / (enc["labels"] != -100).sum(1).clamp_min(1)


def ifd_losses(model: nn.Module, pairs, batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ℓ̄(y|x), ℓ̄(y))`` per pair: the response's mean loss with and without its instruction."""
    if isinstance(pairs, dict) or not isinstance(pairs, (list, tuple)) or not pairs:
        raise TypeError("pairs: expected a non-empty list of InstructionPair (IFD re-encodes them)")
    given = mean_response_losses(model, encode_pairs(list(pairs)), batch_size)
    alone = mean_response_losses(model, encode_pairs(list(pairs), instruction=False), batch_size)
    return given, alone


def rho1_reference_model(
    base_model: nn.Module,
    target,
    *,
    steps: int = 50,
    batch_size: int = 16,
    lr: float = 1e-3,
    **lora,
) -> nn.Module:
    """RHO-1's reference model: ``base_model`` LoRA-tuned on ``target`` (uniform weights), merged.

    ``lora`` goes to :class:`~qcs.rollouts.LoRARollouts` (``r``, ``target_modules``, ``seed``, ...).
    The base model is not modified; the result is a plain model in eval mode.
    """
    _check_int(steps, "steps", 1)
    ro = LoRARollouts(base_model, target, target, steps=steps, batch_size=batch_size, lr=lr, **lora)
    tuned = ro.train_fn(torch.ones(ro.n, ro.max_tokens))
    merged = copy.deepcopy(tuned).merge_and_unload()
    merged.eval()
    return merged


def rho1_losses(
    model: nn.Module, reference: nn.Module, data, batch_size: int = 64
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(token_loss, reference_loss, token_mask)``, each ``[N, T_max]`` in the response layout."""
    enc = as_encoding(data)
    tok, mask = response_layout(response_token_losses(model, enc, batch_size), enc)
    ref, _ = response_layout(response_token_losses(reference, enc, batch_size), enc)
    return tok, ref, mask
