"""The reduced reproduction's training runs: tiny Llamas on the stdlib corpus, AdamW at a given τ or λ.

One run trains a ``LlamaForCausalLM`` built from a config (byte vocabulary) on
:func:`neurips25_core.data.stdlib_corpus` for D = TPP·N tokens at batch B, with AdamW (β = 0.9,
0.95), peak LR η, 5 % linear warm-up and linear decay to 0 (the paper's schedule), clipping at 1,
then measures the held-out loss (nats per byte) on fixed windows of the validation files. Every run
is cached through :func:`neurips25_core.models.cached_checkpoint` (weights and metrics), keyed
by the spec, the model config, the corpus fingerprint and the loop version, so a sweep that is
run again, or reused by another case, costs nothing.

The loop is this package's own because the core's :func:`neurips25_core.models.train` has a
cosine schedule with a floor, not linear decay to 0; it keeps the core loop's guarantees (runs
under ``enable_grad`` even inside ``no_grad``/``inference_mode``, checks its arguments).

Example (CPU, a few seconds):

    >>> from hpscaling.experiment import RunSpec, run
    >>> spec = RunSpec(hidden=16, heads=2, seq_len=32, batch=4, tpp=0.2, tau=0.5)
    >>> result = run(spec, progress=False)
    >>> result["steps"] > 0 and result["val_loss"] > 0
    True
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch

from hpscaling.laws import check_positive
from hpscaling.optim import apply_timescale, decay_exempt

__all__ = ["LOOP_VERSION", "RunSpec", "model_config", "num_params", "run", "train_run"]

#: Bumped whenever the loop changes what a run computes (part of every cache key).
LOOP_VERSION = 1


def model_config(hidden: int, layers: int = 2, heads: int = 4, seq_len: int = 64):
    """The tiny Llama of the reduced reproduction (byte vocabulary, untied embeddings)."""
    from neurips25_core.models import tiny_llama_config

    return tiny_llama_config(
        hidden_size=hidden, num_layers=layers, num_heads=heads, max_position_embeddings=seq_len
    )


def num_params(config) -> int:
    """All parameters of the model ``config`` builds (embeddings included: at ~10⁵ parameters the
    embedding and output tables are a third of the model, and N is what TPP divides by)."""
    from neurips25_core.models import tiny_llama

    with torch.device("meta"):
        return sum(p.numel() for p in tiny_llama(config).parameters())


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One training run. Give exactly one of ``tau`` (λ is set by :func:`apply_timescale`) or ``lam``.

    Attributes:
        hidden, layers, heads, seq_len: the model (seq_len is also the training window).
        batch: sequences per step (B in tokens is ``batch · seq_len``).
        tpp: tokens per parameter; D = round(tpp · N / B) · B tokens.
        eta: peak learning rate.
        tau: the AdamW timescale as a fraction of training; or
        lam: the weight decay (0 for none).
        warmup_fraction: linear warm-up share of the steps; then linear decay to 0.
        seed: model initialisation and batch order (the same for every λ: common random numbers).
        eval_batches: validation batches of 32 windows.
    """

    hidden: int
    batch: int
    tpp: float
    layers: int = 2
    heads: int = 4
    seq_len: int = 64
    eta: float = 3e-3
    tau: float | None = None
    lam: float | None = None
    warmup_fraction: float = 0.05
    seed: int = 0
    eval_batches: int = 16

    def __post_init__(self) -> None:
        for name in ("hidden", "batch", "layers", "heads", "seq_len", "eval_batches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        check_positive("tpp", self.tpp)
        check_positive("eta", self.eta)
        if (self.tau is None) == (self.lam is None):
            raise ValueError("tau: give exactly one of tau or lam")
        if self.tau is not None:
            check_positive("tau", self.tau)
        if self.lam is not None:
            check_positive("lam", self.lam, allow_zero=True)
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction: expected in [0, 1), got {self.warmup_fraction!r}")

    @property
    def config(self):
        return model_config(self.hidden, self.layers, self.heads, self.seq_len)

    def sizes(self) -> dict[str, float]:
        """N, B (tokens), steps, D (tokens, a whole number of steps) and the λ this spec trains with."""
        n = num_params(self.config)
        b = self.batch * self.seq_len
        steps = max(1, round(self.tpp * n / b))
        d = steps * b
        lam = self.lam if self.lam is not None else b / (self.eta * self.tau * d)
        return {"N": n, "B": b, "steps": steps, "D": d, "lam": lam}


def _linear_warmup_decay(steps: int, warmup: int):
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (steps - step) / max(1, steps - warmup))

    return factor


def train_run(
    spec: RunSpec,
    corpus=None,
    progress: bool = True,
    device: str | torch.device = "cpu",
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Train ``spec`` once (no cache): returns ``(state_dict, metrics)``.

    Runs under ``torch.enable_grad()`` (and outside inference mode), so a caller inside
    ``torch.no_grad()`` still trains.
    """
    if not isinstance(spec, RunSpec):
        raise TypeError(f"spec: expected a RunSpec, got {type(spec).__name__}")
    if torch.is_inference_mode_enabled():
        with torch.inference_mode(False):
            return train_run(spec, corpus, progress, device)
    with torch.enable_grad():
        return _train_run(spec, corpus, progress, torch.device(device))


def _train_run(spec: RunSpec, corpus, progress: bool, device: torch.device):
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import evaluate_bpb, tiny_llama
    from neurips25_core.progress import progress_bar

    corpus = corpus if corpus is not None else stdlib_corpus()
    sizes = spec.sizes()
    steps = int(sizes["steps"])
    model = tiny_llama(spec.config, seed=spec.seed).to(device)
    optimizer = torch.optim.AdamW(
        decay_exempt(model), lr=spec.eta, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0
    )
    if spec.tau is not None:
        apply_timescale(optimizer, spec.tau, B=sizes["B"], D=sizes["D"])
    else:
        optimizer.param_groups[0]["weight_decay"] = float(spec.lam)
    warmup = max(1, round(spec.warmup_fraction * steps)) if spec.warmup_fraction > 0 else 0
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, _linear_warmup_decay(steps, warmup))
    generator = torch.Generator().manual_seed(spec.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    losses: list[float] = []
    model.train()
    start = time.perf_counter()
    bar = progress_bar(
        total=steps,
        desc=f"h{spec.hidden} B{spec.batch} λ={sizes['lam']:.3g}",
        enabled=progress,
        leave=False,
    )
    with bar:
        for step in range(steps):
            x, y = corpus.get_batch("train", spec.batch, spec.seq_len, generator=generator)
            x, y = x.to(device), y.to(device)
            logits = model(x).logits
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1)
            )
            if not torch.isfinite(loss):
                raise FloatingPointError(f"train_run: loss became {loss.item()} at step {step}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            schedule.step()
            losses.append(loss.detach().item())
            bar.update(1)
    seconds = time.perf_counter() - start
    val_bpb = evaluate_bpb(
        model, corpus, "val", batch_size=32, seq_len=spec.seq_len, num_batches=spec.eval_batches
    )
    tail = losses[-max(1, steps // 20) :]
    metrics = {
        **{k: float(v) for k, v in sizes.items()},
        "tau": sizes["B"] / (spec.eta * sizes["lam"] * sizes["D"])
        if sizes["lam"] > 0
        else math.inf,
        "eta": spec.eta,
        "tpp_actual": sizes["D"] / sizes["N"],
        "val_loss": val_bpb * math.log(2),
        "val_bpb": val_bpb,
        "train_loss_tail": sum(tail) / len(tail),
        "seconds": seconds,
        "tokens_per_second": sizes["D"] / seconds,
    }
    state = {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
    return state, metrics


def run(spec: RunSpec, corpus=None, progress: bool = True) -> dict[str, Any]:
    """Train ``spec`` on CPU, or load its result from the checkpoint cache; returns its metrics.

    The metrics hold N, B, D (tokens), steps, λ, τ, η, ``val_loss`` (nats per byte on held-out
    files), ``train_loss_tail``, ``seconds`` and ``cached``.
    """
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import cached_checkpoint

    if not isinstance(spec, RunSpec):
        raise TypeError(f"spec: expected a RunSpec, got {type(spec).__name__}")
    corpus = corpus if corpus is not None else stdlib_corpus()

    def build():
        return train_run(spec, corpus, progress)

    _, meta = cached_checkpoint(
        "hpscaling_run",
        {
            "spec": dataclasses.asdict(spec),
            "config": spec.config,
            "data": corpus.fingerprint,
            "loop": LOOP_VERSION,
            "optimizer": "AdamW(betas=(0.9, 0.95), eps=1e-8), clip 1.0, linear warmup/decay to 0",
        },
        build,
    )
    out = {k: v for k, v in meta.items() if k not in ("key_parts",)}
    out["spec"] = dataclasses.asdict(spec)
    return out
