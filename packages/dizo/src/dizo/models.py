"""The reduced reproduction's base model: a tiny OPT pretrained on the stdlib minus two families.

The spec's model is an OPT config from ``transformers`` (hidden 64, 4 layers, 4 heads, FFN 256,
byte vocabulary, 128 positions; 0.22M parameters as built here), pretrained with AdamW on
:func:`neurips25_core.data.stdlib_corpus`'s files minus ``email/`` and ``json/`` (the held-out
families that task A adapts to and task B classifies), cached through
:func:`neurips25_core.models.cached_checkpoint`. OPT keeps the official code's parameter names
(``self_attn.k_proj.weight``, ``embed_tokens``), so DiZO's default selection applies unchanged.

>>> from dizo.models import opt_config
>>> cfg = opt_config(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, ffn_dim=64)
>>> cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
(16, 1, 256)
"""

from __future__ import annotations

import functools
import hashlib
import sysconfig
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neurips25_core.data import Corpus, stdlib_files

#: Families held out of pretraining (task A adapts to them; task B's second class is ``email/``).
HELD_OUT = ("email/", "json/")
#: The spec's OPT: hidden 64, 4 layers, 4 heads, FFN 256, bytes, 128 positions.
OPT_TINY = {
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "ffn_dim": 256,
    "max_position_embeddings": 128,
}
#: Smoke size (issue: 1 layer, width 16).
OPT_SMOKE = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "ffn_dim": 64}
#: Pretraining per mode: (steps, batch, sequence length). quick pretrains briefly so that an
#: empty-cache quick run stays near a minute; full pretrains the documented model.
PRETRAIN = {"smoke": (30, 4, 64), "quick": (120, 16, 32), "full": (1500, 16, 128)}


def opt_config(**overrides: Any):
    """An ``OPTConfig`` with the spec's sizes (``overrides`` replace any field); dropout off."""
    from transformers import OPTConfig

    kw: dict[str, Any] = {
        "vocab_size": 256,
        "word_embed_proj_dim": None,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "layerdrop": 0.0,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        **OPT_TINY,
    }
    kw.update(overrides)
    if kw["word_embed_proj_dim"] is None:
        kw["word_embed_proj_dim"] = kw["hidden_size"]
    return OPTConfig(**kw)


def _family(rel: str) -> str | None:
    return next((f for f in HELD_OUT if rel.startswith(f)), None)


def _corpus(held_out: bool, val_every: int) -> Corpus:
    if not isinstance(val_every, int) or val_every < 2:
        raise ValueError(f"val_every: expected an int >= 2, got {val_every!r}")
    base = Path(sysconfig.get_paths()["stdlib"])
    train, val, train_names, val_names = [], [], [], []
    tag = "dizo-held-out" if held_out else "dizo-pretrain"
    h = hashlib.sha256(f"{tag}:v1:{val_every}:{HELD_OUT}".encode())
    kept = 0
    for f in stdlib_files(base):
        rel = f.relative_to(base).as_posix()
        if (_family(rel) is not None) != held_out:
            continue
        content = f.read_bytes() + b"\n"
        h.update(f"{rel}:{len(content)};".encode())
        (val if kept % val_every == 0 else train).append(content)
        (val_names if kept % val_every == 0 else train_names).append(rel)
        kept += 1

    def tensor(parts):
        return torch.from_numpy(np.frombuffer(b"".join(parts), dtype=np.uint8).copy())

    return Corpus(
        train=tensor(train),
        val=tensor(val),
        train_files=tuple(train_names),
        val_files=tuple(val_names),
        fingerprint=h.hexdigest()[:16],
    )


@functools.lru_cache(maxsize=2)
def pretraining_corpus(val_every: int = 20) -> Corpus:
    """The stdlib files outside :data:`HELD_OUT` as a byte :class:`~neurips25_core.data.Corpus`.

    Every ``val_every``-th kept file (in sorted order) is validation; files are never split.
    Cached per process (every case of a run shares it).
    """
    return _corpus(held_out=False, val_every=val_every)


@functools.lru_cache(maxsize=2)
def held_out_corpus(val_every: int = 5) -> Corpus:
    """Task A's data: the :data:`HELD_OUT` families (never seen in pretraining) as a Corpus.

    Split by file like :func:`pretraining_corpus` (every ``val_every``-th file, sorted, is
    validation: 7 of 34 files with the default), so validation bits/byte measure adaptation to
    the family, not memorisation of the training windows.

    >>> c = held_out_corpus()
    >>> all(f.startswith(HELD_OUT) for f in c.train_files + c.val_files)
    True
    >>> set(c.train_files) & set(c.val_files)
    set()
    """
    return _corpus(held_out=True, val_every=val_every)


def pretrained_opt(mode: str = "quick", progress: bool = False, seed: int = 0):
    """The tiny OPT for a benchmark mode, pretrained with AdamW (cached); returned in eval mode.

    ``model.neurips25_meta`` holds the pretraining metadata (validation bits/byte, seconds,
    whether it came from the cache).
    """
    from transformers import OPTForCausalLM

    from neurips25_core.bench import single_thread
    from neurips25_core.models import cached_checkpoint, evaluate_bpb, train, train_arguments

    if mode not in PRETRAIN:
        raise ValueError(f"mode: expected one of {sorted(PRETRAIN)}, got {mode!r}")
    config = opt_config(**(OPT_SMOKE if mode == "smoke" else {}))
    steps, batch, seq = PRETRAIN[mode]
    corpus = pretraining_corpus()
    args = {"steps": steps, "batch_size": batch, "seq_len": seq, "lr": 3e-3, "seed": seed}
    torch.manual_seed(seed)
    model = OPTForCausalLM(config)

    def build():
        with single_thread():
            res = train(model, corpus, progress=progress, desc="pretrain tiny OPT", **args)
            bpb = evaluate_bpb(model, corpus, seq_len=seq)
        return model.state_dict(), {"val_bpb": bpb, "seconds": res.seconds, "steps": steps}

    state, meta = cached_checkpoint(
        "dizo_opt",
        {
            "config": config,
            "data": corpus.fingerprint,
            "held_out": list(HELD_OUT),
            "init_seed": seed,
            "train": train_arguments(**args),
            "version": 1,
        },
        build,
    )
    if meta["cached"]:
        model.load_state_dict(state)
    model.eval()
    model.neurips25_meta = meta
    return model
