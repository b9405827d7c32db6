"""Evaluation: perplexity against length, and passkey retrieval."""

from __future__ import annotations

import math

import torch

from .calibrate import sequence_nll

NEEDLE = " The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = " What is the pass key? The pass key is "


@torch.no_grad()
def ppl_vs_length(model, ids: torch.Tensor, lengths) -> dict[int, float]:
    """Perplexity of ``ids[:, :T]`` (loss over all positions, one window) for every ``T`` in ``lengths``."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
        raise ValueError("ids: expected a 2-D integer tensor (n, L)")
    out = {}
    for t in lengths:
        if not 2 <= int(t) <= ids.shape[1]:
            raise ValueError(f"lengths: expected values in [2, {ids.shape[1]}], got {t}")
        out[int(t)] = math.exp(sequence_nll(model, ids[:, : int(t)]))
    return out


def _utf8(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def passkey_batch(
    filler_ids: torch.Tensor,
    length: int,
    depth: float,
    n: int,
    generator: torch.Generator,
    digits: int = 5,
    encode=_utf8,
    return_mask: bool = False,
):
    """``n`` passkey prompts of exactly ``length`` tokens and the number of answer tokens at the end.

    Each row is a random window of ``filler_ids`` with the needle (``NEEDLE`` holding a random
    ``digits``-digit key) inserted at ``depth`` (0 = start, 1 = just before the question), then
    ``QUESTION`` and the key itself: the last ``answer_len`` tokens are the answer. With
    ``return_mask`` a third item, a boolean ``(n, length)`` tensor, marks the non-filler tokens
    (needle, question, answer): a training target that skips the filler.
    """
    rows, masks, answer_len = [], [], None
    for _ in range(n):
        key = "".join(str(int(d)) for d in torch.randint(0, 10, (digits,), generator=generator))
        needle = encode(NEEDLE.format(key=key))
        question, answer = encode(QUESTION), encode(key)
        n_fill = length - len(needle) - len(question) - len(answer)
        if n_fill < 0:
            raise ValueError(
                f"lengths: {length} is shorter than the passkey prompt "
                f"({length - n_fill} tokens without filler)"
            )
        start = int(torch.randint(0, filler_ids.numel() - n_fill, (1,), generator=generator))
        fill = filler_ids[start : start + n_fill].tolist()
        at = round(depth * n_fill)
        rows.append(fill[:at] + needle + fill[at:] + question + answer)
        masks.append(
            [0] * at
            + [1] * len(needle)
            + [0] * (n_fill - at)
            + [1] * (length - n_fill - len(needle))
        )
        answer_len = len(answer)
    ids = torch.tensor(rows, dtype=torch.long)
    if return_mask:
        return ids, answer_len, torch.tensor(masks, dtype=torch.bool)
    return ids, answer_len


@torch.no_grad()
def passkey(
    model,
    lengths,
    depths,
    filler_ids: torch.Tensor,
    n: int = 4,
    digits: int = 5,
    seed: int = 0,
    encode=_utf8,
) -> dict[tuple[int, float], float]:
    """Passkey retrieval accuracy for every (length, depth): the fraction of prompts whose key the
    model reproduces exactly under greedy decoding.

    A prompt is ``length`` tokens of ``filler_ids`` (e.g. stdlib source bytes) with
    "The pass key is 12345. Remember it. 12345 is the pass key." inserted at relative ``depth``,
    ending with "What is the pass key? The pass key is" (DeciMamba/LongMamba style). Greedy
    decoding reproduces the key exactly iff the argmax at every answer position under teacher
    forcing is the right token, so one forward per batch decides it (no ``generate`` loop).
    ``encode`` maps text to token ids (default: UTF-8 bytes, for byte-level models).

    Example:
        >>> from transformers import MambaConfig, MambaForCausalLM
        >>> model = MambaForCausalLM(
        ...     MambaConfig(vocab_size=256, hidden_size=8, num_hidden_layers=1)
        ... )
        >>> filler = torch.randint(32, 127, (4096,))
        >>> acc = passkey(model, [128], [0.0, 1.0], filler, n=2)
        >>> sorted(acc)
        [(128, 0.0), (128, 1.0)]
    """
    if not isinstance(filler_ids, torch.Tensor) or filler_ids.dim() != 1:
        raise ValueError("filler_ids: expected a 1-D integer tensor")
    if filler_ids.is_floating_point() or filler_ids.dtype == torch.bool:
        raise ValueError(f"filler_ids: expected an integer dtype, got {filler_ids.dtype}")
    lengths = [int(t) for t in lengths]
    depths = [float(d) for d in depths]
    if not lengths or min(lengths) < 2:
        raise ValueError(f"lengths: expected a non-empty list of lengths >= 2, got {lengths}")
    if max(lengths) >= filler_ids.numel():
        raise ValueError(
            f"filler_ids: {filler_ids.numel()} tokens, need more than the longest length {max(lengths)}"
        )
    if not depths or not all(0.0 <= d <= 1.0 for d in depths):
        raise ValueError(f"depths: expected values in [0, 1], got {depths}")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected a positive int, got {n!r}")
    if not isinstance(digits, int) or digits < 1:
        raise ValueError(f"digits: expected a positive int, got {digits!r}")
    g = torch.Generator().manual_seed(seed)
    out = {}
    for length in lengths:
        for depth in depths:
            ids, k = passkey_batch(filler_ids, length, depth, n, g, digits, encode)
            # transformers models: no cache, so a patched Mamba-1 runs its chunked scan
            extra = {"use_cache": False} if hasattr(model, "config") else {}
            logits = model(ids[:, :-1], **extra).logits[:, -k:]
            hit = (logits.argmax(-1) == ids[:, -k:]).all(dim=1)
            out[(length, depth)] = float(hit.float().mean())
    return out
