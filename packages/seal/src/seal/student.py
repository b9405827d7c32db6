"""The distilled students: SEAL (SFT + DPO) and its ablations (spec §5 "Arms", issue 38 item 5).

- ``SEAL``: multi-task SFT on ``build_sft`` (anon + priv + util), then DPO on ``build_preferences``
  against a frozen copy of the SFT model; anonymizes by self-refinement (``SelfRefiner``).
- ``SFTOnly``: the same SFT, no DPO; also self-refines.
- ``AnonymizeOnlySFT``: SFT on the anonymization pairs only, with the critique removed from the
  prompt (``<anon> text: x_i <rewrite>`` -> x_j, the same (i, j) pairs as D_anon): a plain rewriter
  that cannot critique itself, applied ``iterations`` times (*ours*: the paper's ablation rows name
  the tasks, not the prompt format).

Every arm builds its ``WordTokenizer`` from its own training strings and its model with
``seal.models.tiny_lm``; all follow the anonymizer protocol ``.anonymize(text, feedback=None)``, and
``.refine(texts)`` returns the per-text states. The student never sees a profile's true attributes:
its data are the trajectories' texts and attacker guesses.

Example (CPU, seconds; a few steps of a 1-layer model anonymize nothing useful):

    >>> from seal import (
    ...     LexiconInferrer,
    ...     SyntheticProfiles,
    ...     UtilityJudge,
    ...     AdversarialAnonymizer,
    ...     collect,
    ... )
    >>> profiles = SyntheticProfiles(6, seed=0)
    >>> trajs = collect(
    ...     profiles, AdversarialAnonymizer(), LexiconInferrer(), UtilityJudge(), seed=0
    ... )
    >>> arm = SFTOnly(layers=1, width=32, heads=2, sft_steps=2, batch_size=4, max_new_tokens=8)
    >>> isinstance(arm.fit(trajs).anonymize(profiles[0].text), str)
    True
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace

from seal.baselines import feedback_attributes
from seal.distill import TASKS, _better, _trajectories, build_preferences, build_sft
from seal.models import WordTokenizer, tiny_lm
from seal.refine import PERFECT, SelfRefiner, plain_anon_prompt
from seal.scoring import _text
from seal.train import dpo, sft
from seal.trajectory import State, Trajectory

__all__ = ["SEAL", "AnonymizeOnlySFT", "SFTOnly", "StudentConfig", "anonymize_only_examples"]


@dataclass(frozen=True)
class StudentConfig:
    """Spec §5 defaults: 4 layers, width 128; SFT 600 steps batch 16 AdamW 1e-3; DPO 200 steps 1e-4."""

    layers: int = 4
    width: int = 128
    heads: int = 4
    max_positions: int = 1024
    sft_steps: int = 600
    sft_lr: float = 1e-3
    dpo_steps: int = 200
    dpo_lr: float = 1e-4
    beta: float = 0.1
    batch_size: int = 16
    iterations: int = 3
    max_new_tokens: int = 256
    min_count: int = 1
    seed: int = 0


#: The settings an SFT stage depends on, and those of a whole student.
_SFT_FIELDS = (
    "layers",
    "width",
    "heads",
    "max_positions",
    "sft_steps",
    "sft_lr",
    "batch_size",
    "min_count",
    "seed",
)
_ALL_FIELDS = (*_SFT_FIELDS, "dpo_steps", "dpo_lr", "beta")


def _check_state(
    state: object, arm: str, config: StudentConfig, names: tuple[str, ...], argument: str
) -> None:
    if not isinstance(state, Mapping) or not {"arm", "config", "vocab", "model"} <= set(state):
        raise ValueError(f"{argument}: not a student state_dict (needs arm, config, vocab, model)")
    if state["arm"] != arm:
        raise ValueError(f"{argument}: a {state['arm']} state, expected {arm}")
    theirs = state["config"]
    diff = [n for n in names if theirs.get(n) != getattr(config, n)]
    if diff:
        shown = ", ".join(f"{n}={theirs.get(n)!r} (here {getattr(config, n)!r})" for n in diff)
        raise ValueError(f"{argument}: trained with other settings: {shown}")


def anonymize_only_examples(trajectories: Sequence[Trajectory]) -> list[tuple[str, str]]:
    """``(plain_anon_prompt(x_i), x_j)`` for the D_anon pairs (j > i, more private, no less useful)."""
    out = []
    for traj in _trajectories(trajectories):
        s = traj.states
        for i, si in enumerate(s):
            for sj in s[i + 1 :]:
                if _better(sj, si):
                    out.append((plain_anon_prompt(si.text), sj.text))
    return out


class SFTOnly:
    """Multi-task SFT student (anon + priv + util), no DPO; anonymizes by self-refinement.

    Keyword arguments override :class:`StudentConfig` fields (``StudentConfig(**kwargs)``).
    """

    tasks: tuple[str, ...] = TASKS
    use_dpo = False

    def __init__(self, config: StudentConfig | None = None, **overrides) -> None:
        if config is not None and not isinstance(config, StudentConfig):
            raise TypeError(f"config: expected a StudentConfig, got {type(config).__name__}")
        known = {f.name for f in fields(StudentConfig)}
        for k in overrides:
            if k not in known:
                raise TypeError(
                    f"{k}: unknown StudentConfig field; known: {', '.join(sorted(known))}"
                )
        self.config = replace(config or StudentConfig(), **overrides)
        if self.config.iterations < 1:
            raise ValueError(f"iterations: must be >= 1, got {self.config.iterations}")
        self.model = None
        self.tokenizer: WordTokenizer | None = None
        self.history: dict[str, object] = {}

    # -- training ------------------------------------------------------------------------------

    def _sft_data(self, trajectories: list[Trajectory]) -> list[tuple[str, str]]:
        return [(e.prompt, e.completion) for e in build_sft(trajectories, self.tasks)]

    def fit(
        self,
        trajectories: Sequence[Trajectory],
        progress: bool = False,
        sft_state: Mapping[str, object] | None = None,
    ):
        """Build the tokenizer and the model, then train; returns ``self``.

        ``sft_state`` (SEAL only): the :meth:`state_dict` of an ``SFTOnly`` trained on the same
        trajectories with the same SFT settings; its model is taken as the SFT stage instead of
        training it again (SEAL's SFT stage *is* ``SFTOnly``: same data, vocabulary, seed), so only
        DPO runs. Refused (``ValueError``) when its settings or vocabulary differ.
        """
        trajectories = _trajectories(trajectories)
        c = self.config
        examples = self._sft_data(trajectories)
        if not examples:
            raise ValueError("trajectories: no SFT examples (no trajectory improved on its start)")
        pairs = build_preferences(trajectories) if self.use_dpo else []
        # every arm's vocabulary covers every text of the trajectories, so the arms differ only in
        # what they are trained on
        corpus = [t for e in examples for t in e] + [s.text for t in trajectories for s in t.states]
        self.tokenizer = WordTokenizer.from_corpus(corpus, min_count=c.min_count)
        self.model = tiny_lm(
            self.tokenizer, c.layers, c.width, c.heads, max_positions=c.max_positions, seed=c.seed
        )
        if sft_state is not None:
            if not self.use_dpo:
                raise ValueError("sft_state: only SEAL (SFT + DPO) continues from an SFT state")
            _check_state(sft_state, "SFTOnly", self.config, _SFT_FIELDS, "sft_state")
            if list(sft_state["vocab"]) != self.tokenizer.vocab:
                raise ValueError(
                    "sft_state: its vocabulary differs from the one these trajectories give "
                    "(trained on other trajectories)"
                )
            self.model.load_state_dict(sft_state["model"])
            self.history["sft"] = sft_state.get("history", {}).get("sft")
        else:
            self.history["sft"] = sft(
                self.model,
                self.tokenizer,
                examples,
                max_steps=c.sft_steps,
                batch_size=c.batch_size,
                lr=c.sft_lr,
                seed=c.seed,
                progress=progress,
            )
        self.history["examples"] = len(examples)
        self.history["pairs"] = len(pairs)
        if self.use_dpo:
            if not pairs:
                raise ValueError("trajectories: no preference pairs for DPO")
            self.history["dpo"] = self._dpo(copy.deepcopy(self.model), pairs, progress)
        self.model.eval()
        return self

    def _dpo_arguments(self, reference, pairs: list, progress: bool) -> dict[str, object]:
        """The DPO stage's arguments (any DPO loop with ``seal.train.dpo``'s signature)."""
        c = self.config
        return dict(
            policy=self.model,
            reference=reference,
            tokenizer=self.tokenizer,
            pairs=pairs,
            max_steps=c.dpo_steps,
            beta=c.beta,
            batch_size=c.batch_size,
            lr=c.dpo_lr,
            seed=c.seed,
            progress=progress,
        )

    def _dpo(self, reference, pairs: list, progress: bool):
        """The DPO stage (SEAL): :func:`seal.train.dpo` against the frozen SFT copy ``reference``;
        returns what goes into ``history["dpo"]`` (it has ``.losses``)."""
        return dpo(**self._dpo_arguments(reference, pairs, progress))

    # -- checkpoints ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, object]:
        """``{"arm", "config", "vocab", "model", "history"}``: tensors, lists and plain values only
        (``torch.load(weights_only=True)`` and ``neurips25_core.models.cached_checkpoint`` take it)."""
        if self.model is None:
            raise RuntimeError(f"{type(self).__name__}: call .fit(trajectories) first")
        history = {}
        for k, v in self.history.items():
            losses = getattr(v, "losses", None)
            history[k] = {"losses": [float(x) for x in losses]} if losses is not None else v
        return {
            "arm": type(self).__name__,
            "config": asdict(self.config),
            "vocab": list(self.tokenizer.vocab),
            "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
            "history": history,
        }

    def load_state_dict(self, state: Mapping[str, object]):
        """Rebuild the tokenizer and the model from :meth:`state_dict`; returns ``self``.

        A state of another arm, of other model or training settings, or whose tensors do not fit
        the model is refused with a ``ValueError``.
        """
        _check_state(state, type(self).__name__, self.config, _ALL_FIELDS, "state")
        c = self.config
        tokenizer = WordTokenizer(state["vocab"])
        model = tiny_lm(tokenizer, c.layers, c.width, c.heads, max_positions=c.max_positions)
        try:
            model.load_state_dict(state["model"])
        except RuntimeError as exc:
            raise ValueError(f"state: its tensors do not fit the model ({exc})") from exc
        self.tokenizer, self.model = tokenizer, model.eval()
        self.history = dict(state.get("history", {}))
        return self

    # -- inference -----------------------------------------------------------------------------

    def refiner(self) -> SelfRefiner:
        if self.model is None:
            raise RuntimeError(f"{type(self).__name__}: call .fit(trajectories) first")
        return SelfRefiner(self.model, self.tokenizer, max_new_tokens=self.config.max_new_tokens)

    def refine(self, texts: Sequence[str], iterations: int | None = None) -> list[list[State]]:
        """Per text, the states of self-refinement (``SelfRefiner.run_batch``)."""
        return self.refiner().run_batch(
            texts, self.config.iterations if iterations is None else iterations
        )

    def anonymize(self, text: str, feedback: object = None) -> str:
        """The refined text; with ``feedback`` (attacker guesses), one rewrite conditioned on it."""
        text = _text("text", text)
        names = feedback_attributes(feedback)
        if feedback is None:
            return self.refine([text])[0][-1].text
        leaks = {a: feedback[a] for a in names} if hasattr(feedback, "keys") else {}
        if not all(hasattr(v, "value") for v in leaks.values()):
            raise TypeError("feedback: expected a mapping {attribute: Inference}")
        return self.refiner().anonymize_with([text], [leaks], [PERFECT])[0]


class SEAL(SFTOnly):
    """SFT + DPO (the method): multi-task SFT, then DPO against a frozen copy of the SFT model."""

    use_dpo = True


class AnonymizeOnlySFT(SFTOnly):
    """Ablation: SFT on the anonymization pairs only, no critique in the prompt, no DPO."""

    tasks = ("anon",)

    def _sft_data(self, trajectories: list[Trajectory]) -> list[tuple[str, str]]:
        return anonymize_only_examples(trajectories)

    def refine(self, texts: Sequence[str], iterations: int | None = None) -> list[list[State]]:
        """``iterations`` plain rewrites per text (it cannot critique itself, so it never stops early);
        the states carry no leaks and a placeholder perfect utility."""
        iterations = self.config.iterations if iterations is None else iterations
        if isinstance(iterations, bool) or not isinstance(iterations, int):
            raise TypeError(f"iterations: expected an int, got {type(iterations).__name__}")
        if iterations < 1:
            raise ValueError(f"iterations: must be >= 1, got {iterations}")
        refiner = self.refiner()
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise TypeError(f"texts: expected a sequence of str, got {type(texts).__name__}")
        current = [_text("texts", t) for t in texts]
        states = [[State(t, {}, PERFECT)] for t in current]
        for _ in range(iterations):
            out = refiner.generate([plain_anon_prompt(t) for t in current])
            current = [o if o.strip() else t for o, t in zip(out, current, strict=True)]
            for s, t in zip(states, current, strict=True):
                s.append(State(t, {}, PERFECT))
        return states

    def anonymize(self, text: str, feedback: object = None) -> str:
        """``iterations`` plain rewrites; ``feedback`` is checked but unused (no critique input)."""
        feedback_attributes(feedback)
        return self.refine([_text("text", text)])[0][-1].text
