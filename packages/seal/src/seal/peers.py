"""The peers a user would reach for instead (the ``peers`` extra; each import happens on use).

* :class:`PresidioScrubber` -- Microsoft Presidio (``presidio-analyzer`` + ``presidio-anonymizer``),
  the open analogue of the paper's Azure-PII baseline. No spaCy model is installed here and none is
  ever downloaded: Presidio's ``SpacyNlpEngine`` loads a *saved* ``spacy.blank("en")`` pipeline
  from a path (a path skips Presidio's downloader), so **there is no NER**. What finds spans is
  Presidio's predefined pattern recognizers (e-mail, phone, dates, ...) plus two recognizers added
  for the synthetic profiles: a deny-list ``LOCATION`` recognizer over the generator's cities (what
  the missing NER model would tag) and an ``AGE`` pattern for explicit ages (Azure PII's Age
  category). Spans are replaced by ``[ENTITY]``, the format of :class:`seal.baselines.PIIScrubber`.
* :func:`trl_dpo_step` -- one step of trl's ``DPOTrainer`` (``ref_model`` passed) on our tokenized
  pairs and our model, returning what trl logs (``loss``, ``rewards/margins``, ...): the
  cross-check of :func:`seal.train.dpo_loss` / :func:`seal.train.sequence_logprob`.
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Iterable, Sequence

from .baselines import feedback_attributes
from .data import SCHEMA
from .student import SEAL

__all__ = [
    "PresidioScrubber",
    "TrlSEAL",
    "presidio_available",
    "trl_available",
    "trl_dpo",
    "trl_dpo_step",
]


def presidio_available() -> bool:
    """Whether presidio-analyzer, presidio-anonymizer and spacy are importable."""
    return all(
        importlib.util.find_spec(m) is not None
        for m in ("presidio_analyzer", "presidio_anonymizer", "spacy")
    )


def trl_available() -> bool:
    """Whether trl (and the ``datasets`` it needs) is importable."""
    return all(importlib.util.find_spec(m) is not None for m in ("trl", "datasets"))


class PresidioScrubber:
    """Presidio analyzer + anonymizer on spaCy's blank English pipeline (no NER, no download).

    Args:
        locations: the deny-list of the ``LOCATION`` recognizer (default: the generator's cities).
        age_pattern: the regex of the ``AGE`` recognizer (default: a 1-3 digit number, the
            generator's explicit ages); ``None`` leaves it out.
        score_threshold: Presidio's minimum span score.
    """

    def __init__(
        self,
        locations: Iterable[str] = SCHEMA.values["city"],
        age_pattern: str | None = r"\b\d{1,3}\b",
        score_threshold: float = 0.3,
    ) -> None:
        if not presidio_available():
            raise ImportError(
                "PresidioScrubber needs presidio-analyzer, presidio-anonymizer and spacy "
                "(the seal 'peers' extra: uv sync --all-packages --extra peers)"
            )
        import tempfile

        import spacy
        from presidio_analyzer import AnalyzerEngine, Pattern, PatternRecognizer, RecognizerRegistry
        from presidio_analyzer.nlp_engine import SpacyNlpEngine
        from presidio_anonymizer import AnonymizerEngine
        from presidio_anonymizer.entities import OperatorConfig

        locations = list(locations)
        if isinstance(locations, str) or not all(isinstance(x, str) and x for x in locations):
            raise TypeError("locations: expected an iterable of non-empty strings")
        if isinstance(score_threshold, bool) or not isinstance(score_threshold, int | float):
            raise TypeError(
                f"score_threshold: expected a float, got {type(score_threshold).__name__}"
            )
        if not 0 <= score_threshold <= 1:
            raise ValueError(f"score_threshold: must be in [0, 1], got {score_threshold}")
        self.score_threshold = float(score_threshold)
        with tempfile.TemporaryDirectory(prefix="seal-spacy-blank-") as path:
            spacy.blank("en").to_disk(path)  # a path: Presidio loads it and never downloads
            engine = SpacyNlpEngine(models=[{"lang_code": "en", "model_name": path}])
            engine.load()
        registry = RecognizerRegistry(supported_languages=["en"])
        registry.load_predefined_recognizers(languages=["en"], nlp_engine=engine)
        if locations:
            registry.add_recognizer(
                PatternRecognizer(
                    supported_entity="LOCATION", deny_list=locations, name="SealCityDenyList"
                )
            )
        if age_pattern is not None:
            registry.add_recognizer(
                PatternRecognizer(
                    supported_entity="AGE",
                    patterns=[Pattern("explicit age", age_pattern, 0.5)],
                    name="SealAgePattern",
                )
            )
        self.analyzer = AnalyzerEngine(
            nlp_engine=engine, registry=registry, supported_languages=["en"]
        )
        self.anonymizer = AnonymizerEngine()
        self.entities = sorted(self.analyzer.get_supported_entities("en"))
        self._operators = {
            e: OperatorConfig("replace", {"new_value": f"[{e}]"}) for e in self.entities
        }

    def analyze(self, text: str):
        """Presidio's ``RecognizerResult`` spans for ``text``."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {type(text).__name__}")
        if not text.strip():
            raise ValueError("text: empty")
        return self.analyzer.analyze(text=text, language="en", score_threshold=self.score_threshold)

    def anonymize(self, text: str, feedback: object = None) -> str:
        """Replace every span Presidio finds by ``[ENTITY]`` (``feedback`` is ignored, like the
        scrubber's: a PII detector reads no attacker)."""
        feedback_attributes(feedback)
        results = self.analyze(text)
        return self.anonymizer.anonymize(
            text=text, analyzer_results=results, operators=self._operators
        ).text


def _hf_tokenizer(tokenizer, directory: str):
    """A ``PreTrainedTokenizerFast`` with our vocabulary and special tokens (a word-level
    ``tokenizer.json`` written to ``directory``): trl reads the pad/eos tokens from it and never
    tokenizes (the pairs reach trl already tokenized)."""
    import json
    import os

    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for i in range(len(tokenizer)):
        vocab.setdefault(tokenizer.decode([i], skip_special=False), i)
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }
    path = os.path.join(directory, "tokenizer.json")
    with open(path, "w") as handle:
        json.dump(spec, handle)
    return PreTrainedTokenizerFast(
        tokenizer_file=path,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
    )


def _require_trl(what: str) -> None:
    if not trl_available():
        raise ImportError(
            f"{what} needs trl and datasets (the seal 'peers' extra: "
            "uv sync --all-packages --extra peers)"
        )


def _run_trainer(
    policy,
    reference,
    tokenizer,
    pairs: Sequence,
    *,
    beta: float,
    max_steps: int,
    batch_size: int,
    optimizers: tuple,
    grad_clip: float | None,
    seed: int,
    progress: bool,
    output_dir: str | None,
):
    """Train ``policy`` in place with trl's ``DPOTrainer`` (``ref_model=reference``) on our
    tokenized pairs; returns the trainer's ``log_history`` (one entry per step)."""
    import tempfile

    from datasets import Dataset  # the type DPOTrainer requires
    from trl import DPOConfig, DPOTrainer

    from .train import _model_max_length, encode_pairs

    encoded = encode_pairs(tokenizer, pairs, _model_max_length(policy))
    if not encoded:
        raise ValueError("pairs: empty")
    dataset = Dataset.from_list(
        [{"prompt_ids": p, "chosen_ids": c, "rejected_ids": r} for p, c, r in encoded]
    )

    class _PreTokenized(DPOTrainer):
        def _prepare_dataset(self, dataset, *args, **kwargs):  # already prompt/chosen/rejected ids
            return dataset

    with tempfile.TemporaryDirectory(prefix="seal-trl-") as tmp:
        args = DPOConfig(
            output_dir=output_dir or tmp,
            beta=beta,
            loss_type=["sigmoid"],
            max_steps=max_steps,
            per_device_train_batch_size=min(batch_size, len(encoded)),
            dataloader_drop_last=len(encoded) >= batch_size,  # full batches, as seal.train.dpo
            max_grad_norm=grad_clip if grad_clip is not None else 0.0,
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            bf16=False,  # trl's configs default to bf16 autocast: keep the model's own precision
            fp16=False,
            gradient_checkpointing=False,  # trl turns it on by default: only slower for tiny models
            max_length=None,
            disable_tqdm=not progress,
            dataloader_num_workers=0,
            seed=seed,
        )
        trainer = _PreTokenized(
            model=policy,
            ref_model=reference,
            args=args,
            train_dataset=dataset,
            processing_class=_hf_tokenizer(tokenizer, tmp),
            optimizers=optimizers,
        )
        trainer.train()
    if trainer.model is not policy:  # never expected on one CPU process; keep the weights anyway
        policy.load_state_dict(trainer.model.state_dict())
    policy.eval()
    return [h for h in trainer.state.log_history if "rewards/margins" in h]


def trl_dpo(
    policy,
    reference,
    tokenizer,
    pairs: Sequence,
    max_steps: int,
    beta: float = 0.1,
    batch_size: int = 16,
    lr: float = 1e-4,
    warmup: int | None = None,
    grad_clip: float | None = 1.0,
    seed: int = 0,
    progress: bool = False,
    output_dir: str | None = None,
) -> dict[str, list[float]]:
    """DPO through trl's ``DPOTrainer`` (``ref_model`` passed), training ``policy`` in place: the
    peer of :func:`seal.train.dpo` with the same optimizer and schedule.

    The optimizer and schedule are handed to the trainer (``optimizers=``) so that they are ours
    (AdamW, betas (0.9, 0.95), no weight decay; linear warm-up over ``warmup`` steps, default
    ``max(1, max_steps // 10)``, then cosine to 0.1 x ``lr``), and the clipping norm is the same;
    what differs is trl's own loop: its batching and batch order (its seeded sampler), padding and
    loss code. One step on one batch holding every pair equals :func:`seal.train.dpo`
    (``tests/test_peers.py``). ``reference`` must be frozen and share no parameter with ``policy``.

    Returns:
        ``{"losses", "margins", "chosen_rewards", "rejected_rewards"}`` per step (trl's log).
    """
    _require_trl("trl_dpo")
    import torch

    from neurips25_core.models import warmup_cosine

    from .train import _check_dpo, _check_int

    if not isinstance(policy, torch.nn.Module):
        raise TypeError(f"policy: expected an nn.Module, got {type(policy).__name__}")
    if reference is None:
        raise TypeError("reference: trl_dpo needs the frozen reference (copy.deepcopy(policy))")
    max_steps, batch_size, lr, beta = _check_dpo(
        policy, reference, tokenizer, max_steps, batch_size, lr, beta
    )
    warmup = max(1, max_steps // 10) if warmup is None else _check_int("warmup", warmup, 0)
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    schedule = warmup_cosine(optimizer, max_steps, warmup, 0.1)
    logs = _run_trainer(
        policy,
        reference,
        tokenizer,
        pairs,
        beta=beta,
        max_steps=max_steps,
        batch_size=batch_size,
        optimizers=(optimizer, schedule),
        grad_clip=grad_clip,
        seed=seed,
        progress=progress,
        output_dir=output_dir,
    )
    return {
        "losses": [float(h["loss"]) for h in logs],
        "margins": [float(h["rewards/margins"]) for h in logs],
        "chosen_rewards": [float(h["rewards/chosen"]) for h in logs],
        "rejected_rewards": [float(h["rewards/rejected"]) for h in logs],
    }


def trl_dpo_step(
    policy,
    reference,
    tokenizer,
    pairs: Sequence,
    beta: float = 0.1,
    output_dir: str | None = None,
) -> dict[str, float]:
    """trl's ``DPOTrainer`` log of its first step on ``pairs`` (one batch holding every pair).

    ``policy`` and ``reference`` are deep-copied (neither is modified), ``ref_model`` is passed,
    the pairs are our :func:`seal.train.encode_pairs` ids (``<bos>`` prompt, completions ending in
    ``<eos>``), so trl and :func:`seal.train.dpo` score the same tokens. Mixed precision is off
    (trl's configs default to bf16 autocast, which moves log-probs by ~1e-4). Returns trl's logged
    metrics of step 1 (computed before its optimizer step): ``loss``, ``rewards/chosen``,
    ``rewards/rejected``, ``rewards/margins``, ``logps/chosen``, ``logps/rejected``, ...
    """
    _require_trl("trl_dpo_step")
    import torch

    from .train import _check_float

    beta = _check_float("beta", beta, positive=True)
    if not pairs:
        raise ValueError("pairs: empty")
    policy = copy.deepcopy(policy)
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-6)
    logs = _run_trainer(
        policy,
        copy.deepcopy(reference),
        tokenizer,
        pairs,
        beta=beta,
        max_steps=1,
        batch_size=len(pairs),
        optimizers=(optimizer, None),
        grad_clip=1.0,
        seed=0,
        progress=False,
        output_dir=output_dir,
    )
    return {k: float(v) for k, v in logs[0].items() if isinstance(v, int | float)}


class _Losses:
    def __init__(self, log: dict[str, list[float]]) -> None:
        self.losses = log["losses"]
        self.margins = log["margins"]


class TrlSEAL(SEAL):
    """SEAL whose DPO stage is trl's ``DPOTrainer`` (:func:`trl_dpo`, ``ref_model`` = the frozen SFT
    copy) with the same pairs, steps, batch, lr, β, optimizer and schedule as
    :class:`seal.student.SEAL`: the benchmark's ``seal_trl`` cross-check arm. Its SFT stage is
    ``SFTOnly``'s (pass ``sft_state=`` to :meth:`fit` to reuse one)."""

    def _dpo(self, reference, pairs: list, progress: bool):
        _require_trl("TrlSEAL")
        return _Losses(trl_dpo(**self._dpo_arguments(reference, pairs, progress)))
