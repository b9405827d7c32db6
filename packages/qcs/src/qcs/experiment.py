"""The reduced reproduction (issue 36, spec §5): every arm on the same pool, same final fine-tune.

One :class:`QualityExperiment` holds the base model (a byte Llama pretrained on the stdlib
corpus), the synthetic pool (six families, 20 % wrong responses, 30 % filler runs), the target
validation set (addition + sorting, the few-shot set every target-aware arm sees) and the test
set. :meth:`QualityExperiment.run_arm` selects with one arm at one budget and seed, fine-tunes the
same LoRA (r = 8 on q/v, ``final_steps`` AdamW steps, the arm's token weights) and scores it.

Arms (``ARMS``):

* ``full``: every sequence, every token (weight 1);
* ``random``, ``perplexity`` (lowest base-model loss), ``ifd`` (Cherry LLM's IFD under the base
  model), ``dsir`` (the ``data-selection`` peer, hashed n-gram importance resampling toward the
  validation set), ``less`` (LoRA warm-up on a random 5 %, Adam-preconditioned gradient features
  projected to 512, ``matching.py`` scoring with the add/sort subtasks): sequence selection,
  weight 1 on every response token of a kept sequence;
* ``rho1_random`` / ``rho1_pool``: RHO-1 token selection (top ``α`` excess loss against a
  reference model tuned on the validation set) on a random ``m`` sequences / on the whole pool,
  hard 0/1 token weights;
* ``qcs_seq`` (``α = 1``, sequence-level PBCS) and ``qcs`` (``α = 0.5``, ``ε = 0.1``): the
  selector with LoRA rollouts of ``rollout_steps`` steps scored by the validation loss; the final
  fine-tune uses the same elastic weights ``ε + (1 − 2ε)·v`` on the kept sequences.

Each arm's selection CPU time (``time.process_time``, one thread) includes computing its inputs
(base-model losses, DSIR's fit, the RHO-1 reference model, the LESS warm-up and features), which
are cached across budgets within one experiment. Readings: RHO-1 scores tokens with the base model
as the training model (static scores, as a selection rule rather than RHO-1's per-batch online
scoring); LESS's warm-up uses the rollouts' learning rate (neither is swept here).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from torch import nn

from .baselines import (
    ifd_scores,
    ifd_selection,
    less_scores,
    less_selection,
    perplexity_selection,
    random_selection,
    rho1_token_mask,
)
from .evaluate import exact_match
from .ops import QCSConfig, _check_int, token_weights
from .rollouts import LoRARollouts, mean_token_loss
from .selector import QCSSelector
from .tasks import encode_pairs, make_instruction_pool, make_target_set

__all__ = [
    "ARMS",
    "CHEAP_ARMS",
    "SIMPLE_ARMS",
    "ArmResult",
    "QualityExperiment",
    "QualitySize",
    "mean_ci",
    "paired_bootstrap_diff",
]

ARMS = (
    "full",
    "random",
    "perplexity",
    "ifd",
    "dsir",
    "less",
    "rho1_random",
    "rho1_pool",
    "qcs_seq",
    "qcs",
)
#: The simple baselines; the strongest per budget (by validation loss) is the headline baseline.
SIMPLE_ARMS = ("random", "perplexity", "ifd", "dsir")
#: Arms cheap enough for more seeds (no rollouts, no gradient features, no reference model).
CHEAP_ARMS = ("full", *SIMPLE_ARMS)


@dataclass(frozen=True)
class QualitySize:
    """Sizes of one mode of the quality case (see :data:`qcs.bench.QUALITY_SIZES`)."""

    n_pool: int
    n_val: int  # target validation examples, both families together
    n_test: int
    budgets: tuple[float, ...]
    arms: tuple[str, ...]
    seeds: tuple[int, ...]  # seeds of the expensive arms
    cheap_seeds: tuple[int, ...]  # seeds of CHEAP_ARMS
    outer_steps: int
    rollouts: int
    rollout_steps: int
    final_steps: int
    batch_size: int = 16
    lr: float = 1e-3
    less_epochs: int = 4
    rho1_steps: int = 50
    token_ratio: float = 0.5
    elastic_eps: float = 0.1
    max_new_bytes: int = 16

    def __post_init__(self) -> None:
        for name in (
            "n_pool",
            "n_val",
            "n_test",
            "outer_steps",
            "rollouts",
            "rollout_steps",
            "final_steps",
            "batch_size",
            "less_epochs",
            "rho1_steps",
            "max_new_bytes",
        ):
            _check_int(getattr(self, name), name, 1)
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown or not self.arms:
            raise ValueError(f"arms: unknown {unknown}; expected a non-empty subset of {ARMS}")
        if not self.budgets or not all(0.0 < b <= 1.0 for b in self.budgets):
            raise ValueError(f"budgets: expected fractions in (0, 1], got {self.budgets}")
        if not self.seeds or not self.cheap_seeds:
            raise ValueError("seeds: expected at least one seed for each kind of arm")

    def seeds_for(self, arm: str) -> tuple[int, ...]:
        return self.cheap_seeds if arm in CHEAP_ARMS else self.seeds

    def budget_count(self, fraction: float) -> int:
        return max(1, round(fraction * self.n_pool))


@dataclass
class ArmResult:
    """One arm at one budget and seed: what it kept and how the fine-tuned model scores."""

    arm: str
    budget: int
    seed: int
    rows: torch.Tensor  # kept sequence indices
    weights: torch.Tensor  # [n, T] token weights of the final fine-tune
    selection_seconds: float  # CPU seconds, inputs included
    val_loss: float
    test_loss: float
    test_correct: torch.Tensor  # [n_test] bool, exact match per test example
    wrong_share: float  # kept sequences whose response is wrong
    filler_share: float  # full-weight kept response tokens that are planted filler
    extra: dict = field(default_factory=dict)

    @property
    def exact_match(self) -> float:
        return float(self.test_correct.float().mean())


class QualityExperiment:
    """All arms of the reduced reproduction on one base model (see the module docstring).

    Args:
        base_model: the pretrained byte Llama (never modified).
        size: a :class:`QualitySize`.
    """

    def __init__(self, base_model: nn.Module, size: QualitySize) -> None:
        if not isinstance(base_model, nn.Module):
            raise TypeError(f"base_model: expected an nn.Module, got {type(base_model).__name__}")
        if not isinstance(size, QualitySize):
            raise TypeError(f"size: expected a QualitySize, got {type(size).__name__}")
        self.base, self.size = base_model, size
        self.pool = make_instruction_pool(size.n_pool, seed=0)
        self.val = make_target_set(size.n_val, seed=1)
        self.test = make_target_set(size.n_test, seed=2)
        self.enc = encode_pairs(self.pool)
        self.val_enc = encode_pairs(self.val)
        self.test_enc = encode_pairs(self.test)
        lengths = self.enc["token_lengths"]
        self.n, self.T = int(lengths.numel()), int(lengths.max())
        self.real = torch.arange(self.T)[None, :] < lengths[:, None]
        # filler flags in the response layout [n, T]
        j = torch.arange(self.T)
        pos = (self.enc["response_start"][:, None] + j[None, :]).clamp(
            max=self.enc["filler"].shape[1] - 1
        )
        self.filler = self.enc["filler"].gather(1, pos) & self.real
        self.wrong = torch.tensor([p.wrong for p in self.pool])
        self._cache: dict = {}
        self._cache_seconds: dict = {}

    # ------------------------------------------------------------------ cached inputs
    def _cached(self, key, build):
        if key not in self._cache:
            t0 = time.process_time()
            self._cache[key] = build()
            self._cache_seconds[key] = time.process_time() - t0
        return self._cache[key], self._cache_seconds[key]

    def _rollouts(self, steps: int, seed: int) -> LoRARollouts:
        s = self.size
        return LoRARollouts(
            self.base,
            self.enc,
            self.val_enc,
            steps=steps,
            batch_size=s.batch_size,
            lr=s.lr,
            seed=seed,
        )

    # ------------------------------------------------------------------ selection
    def _rows_to_weights(self, rows: torch.Tensor) -> torch.Tensor:
        w = torch.zeros(self.n)
        w[rows] = 1.0
        return w[:, None] * self.real

    def select(self, arm: str, budget: int, seed: int) -> tuple[torch.Tensor, float, dict]:
        """``(weights [n, T], selection CPU seconds, extra)`` of ``arm`` keeping ``budget`` rows."""
        if arm not in ARMS:
            raise ValueError(f"arm: unknown {arm!r}; expected one of {ARMS}")
        _check_int(budget, "budget", 1)
        if budget > self.n:
            raise ValueError(f"budget: must be <= the pool size {self.n}, got {budget}")
        extra: dict = {}
        t0 = time.process_time()
        inputs = 0.0
        if arm == "full":
            weights = self.real.float()
        elif arm == "random":
            g = torch.Generator().manual_seed(seed)
            weights = self._rows_to_weights(random_selection(self.n, budget, g))
        elif arm == "perplexity":
            from .scores import mean_response_losses

            losses, inputs = self._cached("ppl", lambda: mean_response_losses(self.base, self.enc))
            weights = self._rows_to_weights(perplexity_selection(losses, budget))
        elif arm == "ifd":
            from .scores import ifd_losses

            (given, alone), inputs = self._cached("ifd", lambda: ifd_losses(self.base, self.pool))
            rows = ifd_selection(ifd_scores(given, alone), budget)
            extra["kept"] = int(rows.numel())  # IFD may keep fewer (ratios >= 1 dropped)
            weights = self._rows_to_weights(rows)
        elif arm == "dsir":
            from .peers import dsir_selection

            rows, _ = dsir_selection(self.pool, self.val, budget, seed=seed)
            weights = self._rows_to_weights(rows)
        elif arm == "less":
            scores, inputs = self._cached(("less", seed), lambda: self._less_scores(seed))
            weights = self._rows_to_weights(less_selection(scores, budget))
        elif arm in ("rho1_random", "rho1_pool"):
            (tok, ref), inputs = self._cached("rho1", self._rho1_losses)
            if arm == "rho1_pool":
                rows = torch.arange(self.n)
            else:
                rows = random_selection(self.n, budget, torch.Generator().manual_seed(seed))
            chosen = torch.zeros(self.n, dtype=torch.bool)
            chosen[rows] = True
            mask = rho1_token_mask(tok, ref, self.real & chosen[:, None], self.size.token_ratio)
            weights = mask.float()
        else:  # qcs_seq / qcs
            s = self.size
            alpha = 1.0 if arm == "qcs_seq" else s.token_ratio
            cfg = QCSConfig(
                budget=budget,
                token_ratio=alpha,
                elastic_eps=s.elastic_eps,
                rollouts=s.rollouts,
                outer_steps=s.outer_steps,
                inner_steps=s.rollout_steps,
            )
            ro = self._rollouts(s.rollout_steps, seed)
            selector = QCSSelector(ro.train_fn, ro.eval_fn, cfg, seed=seed)
            sel = selector.fit(self.enc)
            chosen = torch.zeros(self.n)
            chosen[sel.sequence_idx] = 1.0
            weights = token_weights(chosen, sel.token_mask, s.elastic_eps, self.real)
            extra["s"] = selector.policy.s.detach().clone()
            extra["F_first"] = selector.history[0]["F_mean"]
            extra["F_last"] = selector.history[-1]["F_mean"]
        seconds = time.process_time() - t0 + inputs
        return weights.float(), seconds, extra

    def _less_scores(self, seed: int) -> torch.Tensor:
        from .less import less_features, less_warmup

        s = self.size
        warm = less_warmup(
            self.base,
            self.enc,
            fraction=0.05,
            epochs=s.less_epochs,
            batch_size=s.batch_size,
            lr=s.lr,
            seed=seed,
        )
        tr = less_features(warm, self.enc, kind="adam", seed=seed)
        va = less_features(warm, self.val_enc, kind="sgd", seed=seed)
        subtask = torch.tensor([0 if p.family == "add" else 1 for p in self.val])
        return less_scores(tr, va, warm.checkpoint_weights, subtask)

    def _rho1_losses(self) -> tuple[torch.Tensor, torch.Tensor]:
        from .scores import rho1_losses, rho1_reference_model

        s = self.size
        ref = rho1_reference_model(
            self.base, self.val_enc, steps=s.rho1_steps, batch_size=s.batch_size, lr=s.lr
        )
        tok, ref_loss, _ = rho1_losses(self.base, ref, self.enc)
        return tok, ref_loss

    # ------------------------------------------------------------------ final fine-tune + scores
    def finetune(self, weights: torch.Tensor, seed: int) -> nn.Module:
        """The same final fine-tune for every arm: LoRA, ``final_steps`` steps, ``weights``."""
        ro = self._rollouts(self.size.final_steps, seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return ro.train_fn(weights)

    def noise_kept(self, weights: torch.Tensor) -> tuple[float, float]:
        """``(wrong share of kept sequences, filler share of full-weight kept tokens)``."""
        rows = weights.sum(1) > 0
        wrong = float(self.wrong[rows].float().mean()) if bool(rows.any()) else math.nan
        full = weights >= weights.max() - 1e-6  # "kept" tokens: the top weight (1, or 1 − ε)
        full &= self.real & rows[:, None]
        filler = float(self.filler[full].float().mean()) if bool(full.any()) else math.nan
        return wrong, filler

    def run_arm(self, arm: str, fraction: float, seed: int) -> ArmResult:
        budget = self.size.budget_count(fraction)
        weights, seconds, extra = self.select(arm, budget, seed)
        model = self.finetune(weights, seed)
        with torch.no_grad():
            val_loss = mean_token_loss(model, self.val_enc)
            test_loss = mean_token_loss(model, self.test_enc)
            correct = exact_match(model, self.test, max_new_bytes=self.size.max_new_bytes)
        wrong, filler = self.noise_kept(weights)
        del model
        return ArmResult(
            arm=arm,
            budget=budget,
            seed=seed,
            rows=torch.nonzero(weights.sum(1) > 0).squeeze(1),
            weights=weights,
            selection_seconds=seconds,
            val_loss=val_loss,
            test_loss=test_loss,
            test_correct=correct,
            wrong_share=wrong,
            filler_share=filler,
            extra=extra,
        )


def mean_ci(values) -> tuple[float, float | None]:
    """Mean and the half-width of its 95 % Student-t interval (None for one value)."""
    from scipy import stats

    x = torch.as_tensor(list(values), dtype=torch.float64)
    if x.numel() == 0:
        raise ValueError("values: expected at least one value")
    mean = float(x.mean())
    if x.numel() < 2:
        return mean, None
    half = float(stats.t.ppf(0.975, x.numel() - 1) * x.std(unbiased=True) / math.sqrt(x.numel()))
    return mean, half


def paired_bootstrap_diff(
    a: torch.Tensor, b: torch.Tensor, n_resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of ``a − b`` and its 95 % paired-bootstrap percentile interval.

    ``a`` and ``b`` are ``[S, N]`` per-test-example scores of two arms on the same ``N`` test
    examples for the same ``S`` seeds; test examples are resampled jointly (``scipy.stats.bootstrap``,
    ``paired=True``) and the statistic is the mean over seeds and examples.
    """
    from scipy import stats

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise TypeError("a, b: expected tensors")
    if a.shape != b.shape or a.dim() != 2:
        raise ValueError(
            f"a, b: expected equal [S, N] shapes, got {tuple(a.shape)}, {tuple(b.shape)}"
        )
    # one resampling unit per test example: its difference averaged over the seeds (every example
    # has every seed, so the mean of these is the mean over seeds and examples)
    d = (a.double() - b.double()).mean(0).numpy()
    mean = float(d.mean())
    if (d == d[0]).all():
        return mean, mean, mean
    res = stats.bootstrap(
        (d,),
        lambda x, axis: x.mean(axis=axis),
        n_resamples=n_resamples,
        method="percentile",
        random_state=seed,
    )
    return mean, float(res.confidence_interval.low), float(res.confidence_interval.high)
