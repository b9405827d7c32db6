"""The student: a word-level tokenizer and a tiny transformers Llama (spec §3 ``seal.models``).

``WordTokenizer`` splits text into words and punctuation, each piece carrying its leading space (as
GPT-2's byte-level BPE does), so ``decode(encode(text))`` gives the text back wherever it has single
spaces (the generator's texts, the prompts and completions of ``seal.distill``). Words never seen in
the corpus become ``<unk>`` (with or without their leading space) -- the judge counts new ``<unk>``
as a readability loss and a hallucination (spec §7).

``tiny_lm`` is a ``LlamaForCausalLM`` built from ``neurips25_core.models.tiny_llama_config``: nothing
is downloaded, attention dropout is 0 (DPO's loss at initialisation is then exactly ln 2).

Example (CPU, instant):

    >>> tok = WordTokenizer.from_corpus(["I live in Zurich.", "I work as a nurse."])
    >>> tok.decode(tok.encode("I live in Zurich."))
    'I live in Zurich.'
    >>> tok.decode(tok.encode("I live in Paris."))
    'I live in <unk>.'
    >>> model = tiny_lm(tok, layers=1, width=32, heads=2)
    >>> model.config.vocab_size == len(tok)
    True
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence

import torch
from torch import nn

__all__ = ["SPECIAL_TOKENS", "WordTokenizer", "tiny_lm"]

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK, " " + UNK)
_FORMAT = "seal.WordTokenizer"
_VERSION = 1
# a marker like <anon>, a word (with an English clitic), one punctuation character, or a newline;
# every piece but the newline keeps its single leading space
_PIECE = re.compile(r" ?<[a-z]+>| ?[A-Za-z0-9]+(?:'[A-Za-z]+)?| ?[^\sA-Za-z0-9]|\n")


def _check_text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected str, got {type(value).__name__}")
    return value


def pieces(text: str) -> list[str]:
    """The pieces ``WordTokenizer`` maps to ids (runs of spaces and tabs collapse to one space)."""
    text = _check_text("text", text)
    return _PIECE.findall(re.sub(r"[ \t\r\f\v]+", " ", text))


class WordTokenizer:
    """Word-level tokenizer with special tokens ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3.

    Build it with :meth:`from_corpus` on the training texts; :meth:`save` / :meth:`load` write and
    read a JSON file (refused when it is not one, or its special tokens are not in place).
    """

    def __init__(self, vocab: Sequence[str]) -> None:
        if isinstance(vocab, str) or not isinstance(vocab, Sequence):
            raise TypeError(f"vocab: expected a sequence of str, got {type(vocab).__name__}")
        vocab = list(vocab)
        for piece in vocab:
            if not isinstance(piece, str) or not piece:
                raise TypeError(f"vocab: expected non-empty str items, got {piece!r}")
        if tuple(vocab[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise ValueError(
                f"vocab: must start with the special tokens {SPECIAL_TOKENS}, got "
                f"{tuple(vocab[: len(SPECIAL_TOKENS)])}"
            )
        if len(set(vocab)) != len(vocab):
            dup = next(p for p, c in Counter(vocab).items() if c > 1)
            raise ValueError(f"vocab: duplicate piece {dup!r}")
        self.vocab: list[str] = vocab
        self.index: dict[str, int] = {p: i for i, p in enumerate(vocab)}
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = 0, 1, 2, 3
        self._space_unk_id = 4

    @classmethod
    def from_corpus(cls, texts: Iterable[str], min_count: int = 1) -> WordTokenizer:
        """Every piece seen at least ``min_count`` times in ``texts``, most frequent first."""
        if isinstance(texts, str) or not isinstance(texts, Iterable):
            raise TypeError(f"texts: expected an iterable of str, got {type(texts).__name__}")
        if isinstance(min_count, bool) or not isinstance(min_count, int):
            raise TypeError(f"min_count: expected an int, got {type(min_count).__name__}")
        if min_count < 1:
            raise ValueError(f"min_count: must be >= 1, got {min_count}")
        counts: Counter[str] = Counter()
        n = 0
        for t in texts:
            counts.update(pieces(_check_text("texts", t)))
            n += 1
        if n == 0 or not counts:
            raise ValueError("texts: empty corpus (no pieces to build a vocabulary from)")
        kept = sorted(
            (p for p, c in counts.items() if c >= min_count and p not in SPECIAL_TOKENS),
            key=lambda p: (-counts[p], p),
        )
        return cls(list(SPECIAL_TOKENS) + kept)

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Ids of ``text``'s pieces; unknown pieces become ``<unk>`` (keeping a leading space)."""
        ids = [
            self.index.get(piece, self._space_unk_id if piece.startswith(" ") else self.unk_id)
            for piece in pieces(text)
        ]
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Iterable[int] | torch.Tensor, skip_special: bool = True) -> str:
        """The text of ``ids``; ``<pad>``/``<bos>``/``<eos>`` are dropped unless ``skip_special`` is False."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"ids: expected a 1-d tensor, got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        out = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"ids: expected int items, got {type(i).__name__}")
            if not 0 <= i < len(self.vocab):
                raise ValueError(f"ids: id {i} is outside the vocabulary [0, {len(self.vocab)})")
            if skip_special and i in (self.pad_id, self.bos_id, self.eos_id):
                continue
            out.append(self.vocab[i])
        return "".join(out).strip(" ")

    def save(self, path: str | os.PathLike) -> None:
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"path: expected a path, got {type(path).__name__}")
        blob = {"format": _FORMAT, "version": _VERSION, "vocab": self.vocab}
        with open(path, "w", encoding="utf-8") as f:
            json.dump(blob, f, ensure_ascii=False)

    @classmethod
    def load(cls, path: str | os.PathLike) -> WordTokenizer:
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"path: expected a path, got {type(path).__name__}")
        try:
            with open(path, encoding="utf-8") as f:
                blob = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"path: {os.fspath(path)!r} is not a WordTokenizer file ({e})"
            ) from None
        if not isinstance(blob, dict) or blob.get("format") != _FORMAT:
            raise ValueError(f"path: {os.fspath(path)!r} is not a WordTokenizer file")
        if blob.get("version") != _VERSION:
            raise ValueError(
                f"path: {os.fspath(path)!r} has version {blob.get('version')!r}, expected {_VERSION}"
            )
        return cls(blob.get("vocab"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WordTokenizer) and self.vocab == other.vocab

    def __repr__(self) -> str:
        return f"WordTokenizer(vocab={len(self.vocab)})"


def tiny_lm(
    vocab: int | WordTokenizer,
    layers: int = 4,
    width: int = 128,
    heads: int = 4,
    max_positions: int = 1024,
    seed: int = 0,
) -> nn.Module:
    """A randomly initialised ``LlamaForCausalLM`` (spec §5: 4 layers, width 128, ~1.2M parameters
    with a ~1.5k-word vocabulary), through ``neurips25_core.models.tiny_llama``; seeded, the global
    RNG untouched. ``vocab`` is a vocabulary size or a :class:`WordTokenizer` (whose pad/bos/eos ids
    then go into the config)."""
    from neurips25_core.models import tiny_llama, tiny_llama_config

    for name, v in (("layers", layers), ("width", width), ("heads", heads)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name}: expected an int, got {type(v).__name__}")
        if v < 1:
            raise ValueError(f"{name}: must be >= 1, got {v}")
    if isinstance(max_positions, bool) or not isinstance(max_positions, int) or max_positions < 2:
        raise ValueError(f"max_positions: expected an int >= 2, got {max_positions!r}")
    special: dict[str, int] = {}
    if isinstance(vocab, WordTokenizer):
        special = dict(
            pad_token_id=vocab.pad_id, bos_token_id=vocab.bos_id, eos_token_id=vocab.eos_id
        )
        size = len(vocab)
    elif isinstance(vocab, bool) or not isinstance(vocab, int):
        raise TypeError(f"vocab: expected an int or a WordTokenizer, got {type(vocab).__name__}")
    else:
        size = vocab
    if size < len(SPECIAL_TOKENS):
        raise ValueError(f"vocab: size must be >= {len(SPECIAL_TOKENS)}, got {size}")
    if width % heads:
        raise ValueError(f"width: {width} is not divisible by heads={heads}")
    config = tiny_llama_config(
        hidden_size=width,
        num_layers=layers,
        num_heads=heads,
        vocab_size=size,
        max_position_embeddings=max_positions,
        attention_dropout=0.0,
        **special,
    )
    return tiny_llama(config, seed=seed)
