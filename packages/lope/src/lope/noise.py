"""HyNoIse: the deliberately corrupted Stage-I data (discrete text noise and continuous embedding noise)."""

from __future__ import annotations

import contextlib
import math
import random
import string

import torch
from torch import nn

__all__ = ["OPERATIONS", "HyNoise"]

OPERATIONS = ("insert", "delete", "shuffle")
UNITS = ("char", "example")
NOISE_CHARACTERS = string.ascii_letters + string.digits + string.punctuation


class HyNoise:
    """HyNoIse: noise-character insertion, character deletion, word-order shuffling; embedding noise.

    ``unit="char"`` (our default reading, spec §2): every character position is an event with
    probability ``rate``, its operation drawn uniformly from ``ops``: ``insert`` puts a random
    printable character before it, ``delete`` drops it, ``shuffle`` swaps the word holding it with
    the next word. ``unit="example"``: with probability ``rate`` the whole text is corrupted by one
    uniformly drawn operation (insert or delete ``max(1, len/10)`` characters, or shuffle every
    word); otherwise it is returned unchanged.

    Continuous noise (``embedding_noise``): ``E' = E + embed_alpha · U(-1, 1) ⊙ mask`` on the input
    embeddings, in train mode only, with no ``1/√(l·d)`` factor (unlike NEFTune).

    Args:
        rate: ρ in ``[0, 1]``.
        embed_alpha: α ≥ 0 of the embedding noise.
        unit: ``"char"`` or ``"example"``.
        ops: the operations used, a non-empty subset of ``OPERATIONS``.
        seed: seed of the text RNG and of the embedding-noise generator.

    Example:
        >>> HyNoise(rate=0.0).corrupt("### Response: 42")
        '### Response: 42'
    """

    def __init__(
        self,
        rate: float = 0.05,
        embed_alpha: float = 0.05,
        unit: str = "char",
        ops: tuple[str, ...] = OPERATIONS,
        seed: int = 614,
    ) -> None:
        for name, value in (("rate", rate), ("embed_alpha", embed_alpha)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name}: expected a real number, got {type(value).__name__}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}: expected a finite number >= 0, got {value}")
        if rate > 1:
            raise ValueError(f"rate: expected a probability in [0, 1], got {rate}")
        if unit not in UNITS:
            raise ValueError(f"unit: expected one of {UNITS}, got {unit!r}")
        ops = tuple(ops)
        if not ops or any(op not in OPERATIONS for op in ops):
            raise ValueError(f"ops: expected a non-empty subset of {OPERATIONS}, got {ops}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed: expected an int, got {type(seed).__name__}")
        self.rate, self.embed_alpha, self.unit, self.ops, self.seed = (
            float(rate),
            float(embed_alpha),
            unit,
            ops,
            seed,
        )
        self._rng = random.Random(seed)
        self._generator = torch.Generator().manual_seed(seed)

    def corrupt(self, text: str) -> str:
        """The corrupted ``text`` (the RNG advances: equal seeds give equal sequences)."""
        return self.corrupt_with_count(text)[0]

    def corrupt_with_count(self, text: str) -> tuple[str, int]:
        """``(corrupted text, number of corruption events)``."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {type(text).__name__}")
        rng = self._rng
        if self.unit == "example":
            if not text or rng.random() >= self.rate:
                return text, 0
            return _whole(text, rng.choice(self.ops), rng), 1
        chars = list(text)
        events = [(i, rng.choice(self.ops)) for i in range(len(chars)) if rng.random() < self.rate]
        swaps = [i for i, op in events if op == "shuffle"]
        if swaps:
            chars = list(_swap_words(text, swaps))
        edits = {i: op for i, op in events if op != "shuffle"}
        out = []
        for i, c in enumerate(chars):
            op = edits.get(i)
            if op == "insert":
                out.append(rng.choice(NOISE_CHARACTERS))
                out.append(c)
            elif op != "delete":
                out.append(c)
        return "".join(out), len(events)

    @contextlib.contextmanager
    def embedding_noise(self, model: nn.Module):
        """Add ``embed_alpha · U(-1, 1) ⊙ attention_mask`` to the input embeddings while active.

        The attention mask is read from each forward call's ``attention_mask`` keyword (all ones
        when absent); the noise is added only while the embedding module is in train mode.
        """
        if not hasattr(model, "get_input_embeddings"):
            raise TypeError(
                f"model: expected a transformers model (get_input_embeddings), got {type(model).__name__}"
            )
        embedding = model.get_input_embeddings()
        state: dict[str, torch.Tensor | None] = {"mask": None}

        def grab_mask(module, args, kwargs):
            state["mask"] = kwargs.get("attention_mask")

        def add_noise(module, args, output):
            if not module.training or self.embed_alpha == 0:
                return output
            noise = torch.rand(output.shape, generator=self._generator, dtype=torch.float32)
            noise = (2 * noise - 1).to(device=output.device, dtype=output.dtype)
            mask = state["mask"]
            if mask is not None:
                noise = noise * mask[..., None].to(noise.dtype)
            return output + self.embed_alpha * noise

        handles = [
            model.register_forward_pre_hook(grab_mask, with_kwargs=True),
            embedding.register_forward_hook(add_noise),
        ]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()


def _word_spans(text: str) -> list[tuple[int, int]]:
    spans, start = [], None
    for i, c in enumerate(text + " "):
        if c.isspace():
            if start is not None:
                spans.append((start, i))
                start = None
        elif start is None:
            start = i
    return spans


def _swap_words(text: str, positions: list[int]) -> str:
    """Swap the word holding each position with the next word (positions in whitespace: no-op)."""
    spans = _word_spans(text)
    words = [text[a:b] for a, b in spans]
    for p in positions:
        for w, (a, b) in enumerate(spans):
            if a <= p < b and w + 1 < len(words):
                words[w], words[w + 1] = words[w + 1], words[w]
                break
    out, last = [], 0
    for (a, b), word in zip(spans, words):
        out.append(text[last:a])
        out.append(word)
        last = b
    out.append(text[last:])
    return "".join(out)


def _whole(text: str, op: str, rng: random.Random) -> str:
    n = max(1, len(text) // 10)
    if op == "shuffle":
        spans = _word_spans(text)
        order = [text[a:b] for a, b in spans]
        rng.shuffle(order)
        out, last = [], 0
        for (a, b), word in zip(spans, order):
            out.append(text[last:a])
            out.append(word)
            last = b
        out.append(text[last:])
        return "".join(out)
    chars = list(text)
    if op == "delete":
        for i in sorted(rng.sample(range(len(chars)), min(n, len(chars))), reverse=True):
            del chars[i]
        return "".join(chars)
    for _ in range(n):
        chars.insert(rng.randrange(len(chars) + 1), rng.choice(NOISE_CHARACTERS))
    return "".join(chars)
