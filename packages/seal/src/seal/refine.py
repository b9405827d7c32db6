"""Self-refinement with one student model (spec §2 "Self-refinement").

From x_0, for t = 0..K-1 the same model does P_t = infer(x_t) (the ``<priv>`` task), U_t =
judge(x_0, x_t) (the ``<util>`` task; U_0 is perfect, as in the trajectories) and x_{t+1} =
anonymize(x_t, P_t, U_t) (the ``<anon>`` task); a text stops as soon as its own inference finds
nothing (P_t = ∅). After the last rewrite P_K and U_K are generated too, so every returned state
carries the model's own critique. That is three generations per iteration.

Generation is ``transformers``' ``generate`` on the KV cache (``use_cache=True``; ``False`` recomputes
the prefix every token and exists for the speed comparison), greedy by default, over a left-padded
batch: ``run_batch`` gives the same texts as ``run`` on each text alone.

Choices (*ours*): a rewrite that decodes to an empty text keeps the previous text (the judge and the
attackers need a text); a critique the parsers cannot read counts as "nothing leaks" (``<priv>``) or
keeps the previous utility (``<util>``); the confidence of an inferred attribute is the midpoint of
its bucket (bucket b -> (b - 0.5) / 5).

Example (CPU; a random tiny model writes nonsense, a trained one rewrites):

    >>> from seal.models import WordTokenizer, tiny_lm
    >>> tok = WordTokenizer.from_corpus(["<priv> text: I live in Zurich. <leaks> city=Zurich:5"])
    >>> refiner = SelfRefiner(tiny_lm(tok, layers=1, width=32, heads=2), tok, max_new_tokens=4)
    >>> states = refiner.run("I live in Zurich.", iterations=2)
    >>> states[0].text
    'I live in Zurich.'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from seal.adversary import Inference
from seal.distill import anon_prompt, parse_leaks, parse_utility, priv_prompt, util_prompt
from seal.scoring import Utility, _text
from seal.trajectory import State

__all__ = ["PERFECT", "SelfRefiner", "plain_anon_prompt"]

PERFECT = Utility(10.0, 10.0, 0, 1.0)


def plain_anon_prompt(text: str) -> str:
    """The anonymize-only prompt (no critique in it): the ``AnonymizeOnlySFT`` ablation's format."""
    return f"<anon> text: {text} <rewrite>"


def _leaks(text: str) -> dict[str, Inference]:
    return {a: Inference(v, (b - 0.5) / 5) for a, (v, b) in parse_leaks(text).items()}


class SelfRefiner:
    """Iterative self-refinement with one student (``seal.models.tiny_lm`` after SFT / DPO).

    Args:
        model: a transformers causal LM whose config has the tokenizer's pad/eos ids.
        tokenizer: its :class:`seal.models.WordTokenizer`.
        max_new_tokens: the longest rewrite (tokens).
        greedy: greedy decoding (default); False samples (seed it with ``torch.manual_seed``).
        critique_tokens: the longest ``<priv>`` / ``<util>`` answer (tokens).
        use_cache: generate on the KV cache (default) or recompute the prefix every token.
        batch_size: texts per ``generate`` call in :meth:`run_batch`.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        max_new_tokens: int = 256,
        greedy: bool = True,
        critique_tokens: int = 48,
        use_cache: bool = True,
        batch_size: int = 32,
    ) -> None:
        if not isinstance(model, nn.Module) or not callable(getattr(model, "generate", None)):
            raise TypeError(
                f"model: expected a transformers causal LM (with .generate), got {type(model).__name__}"
            )
        if not callable(getattr(tokenizer, "encode", None)) or not hasattr(tokenizer, "pad_id"):
            raise TypeError(f"tokenizer: expected a WordTokenizer, got {type(tokenizer).__name__}")
        size = getattr(model.config, "vocab_size", None)
        if size is not None and len(tokenizer) > size:
            raise ValueError(
                f"tokenizer: {len(tokenizer)} tokens do not fit the model's vocab_size={size}"
            )
        for name, v in (
            ("max_new_tokens", max_new_tokens),
            ("critique_tokens", critique_tokens),
            ("batch_size", batch_size),
        ):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name}: expected an int, got {type(v).__name__}")
            if v < 1:
                raise ValueError(f"{name}: must be >= 1, got {v}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.critique_tokens = critique_tokens
        self.greedy = bool(greedy)
        self.use_cache = bool(use_cache)
        self.batch_size = batch_size
        self.critiques = {"priv": 0, "priv_unreadable": 0}

    # -- generation ----------------------------------------------------------------------------

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[str], max_new_tokens: int | None = None, min_new_tokens: int = 0
    ) -> list[str]:
        """Completions of ``prompts`` (batched, left-padded, stops at ``<eos>``; not before
        ``min_new_tokens`` tokens, which the speed case uses to time a fixed number of tokens)."""
        if isinstance(prompts, str) or not isinstance(prompts, Sequence):
            raise TypeError(f"prompts: expected a sequence of str, got {type(prompts).__name__}")
        prompts = [_text("prompts", p) for p in prompts]
        limit = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        if isinstance(min_new_tokens, bool) or not isinstance(min_new_tokens, int):
            raise TypeError(f"min_new_tokens: expected an int, got {type(min_new_tokens).__name__}")
        if not 0 <= min_new_tokens <= limit:
            raise ValueError(f"min_new_tokens: must lie in [0, {limit}], got {min_new_tokens}")
        tok = self.tokenizer
        positions = getattr(self.model.config, "max_position_embeddings", None)
        out: list[str] = []
        was_training = self.model.training
        self.model.eval()
        try:
            device = next(self.model.parameters()).device
            for start in range(0, len(prompts), self.batch_size):
                rows = [
                    tok.encode(p, add_bos=True) for p in prompts[start : start + self.batch_size]
                ]
                width = max(len(r) for r in rows)
                if positions is not None and width + limit > positions:
                    raise ValueError(
                        f"prompts: a prompt of {width} tokens plus max_new_tokens={limit} exceeds the "
                        f"model's max_position_embeddings={positions}"
                    )
                ids = torch.full((len(rows), width), tok.pad_id, dtype=torch.long)
                mask = torch.zeros_like(ids)
                for i, r in enumerate(rows):
                    ids[i, width - len(r) :] = torch.tensor(r)
                    mask[i, width - len(r) :] = 1
                gen = self.model.generate(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    max_new_tokens=limit,
                    min_new_tokens=min_new_tokens or None,
                    do_sample=not self.greedy,
                    num_beams=1,
                    use_cache=self.use_cache,
                    pad_token_id=tok.pad_id,
                    eos_token_id=tok.eos_id,
                    bos_token_id=tok.bos_id,
                )[:, width:]
                for row in gen.tolist():
                    if tok.eos_id in row:
                        row = row[: row.index(tok.eos_id)]
                    out.append(tok.decode(row))
        finally:
            self.model.train(was_training)
        return out

    # -- the three tasks -----------------------------------------------------------------------

    def infer(self, texts: Sequence[str]) -> list[dict[str, Inference]]:
        """The model's own attribute inferences P^π (``<priv>``).

        ``self.critiques`` counts them: ``"priv"`` all, ``"priv_unreadable"`` those that are neither
        ``none`` nor hold one valid ``attribute=value:bucket`` pair (read as "nothing leaks").
        """
        out = []
        for o in self.generate([priv_prompt(t) for t in texts], self.critique_tokens):
            leaks = _leaks(o)
            self.critiques["priv"] += 1
            self.critiques["priv_unreadable"] += not leaks and o.strip() != "none"
            out.append(leaks)
        return out

    def judge(self, originals: Sequence[str], texts: Sequence[str]) -> list[Utility | None]:
        """The model's own utility judgments U^π (``<util>``); ``None`` where unreadable."""
        prompts = [util_prompt(o, t) for o, t in zip(originals, texts, strict=True)]
        return [parse_utility(o) for o in self.generate(prompts, self.critique_tokens)]

    def anonymize_with(
        self, texts: Sequence[str], leaks: Sequence[Mapping[str, Inference]], utilities
    ) -> list[str]:
        """One ``<anon>`` rewrite per text, conditioned on its critique."""
        prompts = [anon_prompt(t, p, u) for t, p, u in zip(texts, leaks, utilities, strict=True)]
        rewrites = self.generate(prompts)
        return [r if r.strip() else t for r, t in zip(rewrites, texts, strict=True)]

    # -- the loop ------------------------------------------------------------------------------

    def run(self, text: str, iterations: int = 3) -> list[State]:
        """States ``s_0..s_k`` (k <= ``iterations``) of refining ``text``; ``s_k.text`` is the output."""
        return self.run_batch([_text("text", text)], iterations)[0]

    def run_batch(self, texts: Sequence[str], iterations: int = 3) -> list[list[State]]:
        """:meth:`run` on many texts at once (each generation step is one left-padded batch)."""
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise TypeError(f"texts: expected a sequence of str, got {type(texts).__name__}")
        if not texts:
            raise ValueError("texts: empty")
        texts = [_text("texts", t) for t in texts]
        if isinstance(iterations, bool) or not isinstance(iterations, int):
            raise TypeError(f"iterations: expected an int, got {type(iterations).__name__}")
        if iterations < 1:
            raise ValueError(f"iterations: must be >= 1, got {iterations}")
        leaks = self.infer(texts)
        states = [[State(t, p, PERFECT, p)] for t, p in zip(texts, leaks, strict=True)]
        for _ in range(iterations):
            live = [i for i, s in enumerate(states) if s[-1].leaks]
            if not live:
                break
            last = [states[i][-1] for i in live]
            new = self.anonymize_with(
                [s.text for s in last], [s.leaks for s in last], [s.utility for s in last]
            )
            new_leaks = self.infer(new)
            utils = self.judge([texts[i] for i in live], new)
            for i, x, p, u, s in zip(live, new, new_leaks, utils, last, strict=True):
                states[i].append(State(x, p, u if u is not None else s.utility, p))
        return states
