"""The reduced reproduction (spec §5): every arm of the issue on the same data and trainer.

Arms (``ARMS``), all with adapters on ``gate_proj``/``up_proj``/``down_proj``, ``lora_alpha=32``,
dropout 0.05, AdamW (weight decay 0), warm-up 3 %, cosine to 0, clipping 1.0, the response-only
loss, batch 16:

- ``lora_r2``/``lora_r4``/``lora_r8``: peft's ``LoraConfig(r, lora_alpha=32, lora_dropout=0.05)``
  (the peer a user would pick). Without peft (the ``peers`` extra) the same LoRA runs as this
  package's layer with N = 1 and no poisoning expert, which tests/test_model.py checks equal to
  peft's LoRA to 1e-6; ``impl`` in the results says which ran.
- ``hydralora``: N = 4 experts, all trained and used (mode ``all``).
- ``hydralora_hynoise``: HydraLoRA trained in one stage on HyNoIse data (the training set
  corrupted again at ρ = 0.05 per character, plus the α = 0.05 embedding noise), spec §3.
- ``lora_neftune``: LoRA r = 4 with transformers' ``activate_neftune`` (α = 5, NEFTune's default).
- ``lope``: Stage I (A, B_D) on HyNoIse data, Stage II (A, normal B, router) on the training set,
  inference with B_D masked and compensated (K = N − 1, β = 1).
- ``lope_unmasked`` and ``lope_k0``: the same trained LoPE adapter evaluated with B_D kept
  (mode ``all``) and with plain masking (K = 0): free, no extra training.
- ``lope_equal_steps``: LoPE with half the epochs per stage, so its total optimizer steps equal a
  single-stage baseline's (the ``lope`` arm matches the paper's equal-epochs protocol and makes
  one extra Stage-I pass).

Every single-stage arm trains ``epochs`` epochs on the noisy training set; LoPE trains ``epochs``
per stage.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import time
from collections.abc import Callable, Sequence

import torch
from torch import nn

from .config import HydraLoRAConfig, LoPEConfig
from .layer import AsymmetricLoRALinear
from .model import LoPEModel, get_peft_model
from .noise import HyNoise
from .ops import route
from .tasks import IGNORE, attention_mask, encode, evaluate, response_loss

__all__ = [
    "ARMS",
    "TARGETS",
    "epoch_batches",
    "mean_ci95",
    "router_mass",
    "run_arms",
    "train_adapter",
]

TARGETS = ["gate_proj", "up_proj", "down_proj"]
ARMS = (
    "lora_r2",
    "lora_r4",
    "lora_r8",
    "hydralora",
    "hydralora_hynoise",
    "lora_neftune",
    "lope",
    "lope_unmasked",
    "lope_k0",
    "lope_equal_steps",
)
#: Arms measured on a LoPE adapter trained for another arm (no training of their own).
DERIVED = {"lope_unmasked": "lope", "lope_k0": "lope"}
NEFTUNE_ALPHA = 5.0


def peft_available() -> bool:
    try:
        import peft  # noqa: F401
    except ImportError:
        return False
    return True


def epoch_batches(
    x: torch.Tensor, y: torch.Tensor, batch_size: int, epochs: int, seed: int
) -> tuple[Callable[[int], tuple[torch.Tensor, torch.Tensor]], int]:
    """``(step -> (x, y), steps)``: ``epochs`` shuffled passes, every example once per epoch.

    The last partial batch of an epoch is dropped (``steps = epochs · (n // batch_size)``); each
    batch is cut after its last target position (``y != -100``). Steps past ``steps`` wrap around.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive int, got {batch_size!r}")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs: expected a positive int, got {epochs!r}")
    per_epoch = x.shape[0] // batch_size
    if per_epoch < 1:
        raise ValueError(f"batch_size: {batch_size} exceeds the {x.shape[0]} examples")
    gen = torch.Generator().manual_seed(seed)
    orders = [torch.randperm(x.shape[0], generator=gen) for _ in range(epochs)]

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        epoch, i = divmod(step, per_epoch)
        idx = orders[epoch % epochs][i * batch_size : (i + 1) * batch_size]
        xb, yb = x[idx], y[idx]
        # Right padding past the batch's last target is dead weight: cut it (bitwise the same
        # loss, causal attention never looks right).
        width = int((yb != IGNORE).any(0).nonzero().max()) + 1 if (yb != IGNORE).any() else 1
        return xb[:, :width], yb[:, :width]

    return batch, epochs * per_epoch


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """``(mean, half-width)`` of the Student-t 95 % confidence interval (0 for one value)."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("values: expected at least one value")
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    from scipy.stats import t

    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n)


@torch.no_grad()
def router_mass(
    model: LoPEModel, x: torch.Tensor, flags: Sequence[bool], batch_size: int = 100
) -> dict[str, float]:
    """Mean router weight ``ω_D`` of the poisoning experts on tokens of clean and of noisy examples.

    Gates are the router's softmax before masking (what the model would give B_D), averaged over
    the non-padding tokens of each group and over the adapted layers. Keys ``clean``, ``noisy``
    (NaN for an empty group).
    """
    if not isinstance(model, LoPEModel) or not model.peft_config.poison_experts:
        raise ValueError("model: expected a LoPEModel with a poisoning expert")
    flags_t = torch.as_tensor(list(flags), dtype=torch.bool)
    if flags_t.shape[0] != x.shape[0]:
        raise ValueError(f"flags: expected {x.shape[0]} flags, got {flags_t.shape[0]}")
    sums = {"clean": 0.0, "noisy": 0.0}
    counts = {"clean": 0, "noisy": 0}
    captured: list[torch.Tensor] = []

    def grab(module: AsymmetricLoRALinear, args):
        flat = args[0].reshape(-1, args[0].shape[-1])
        source = flat if module.router_input == "x" else flat @ module.lora_A.T
        gates = route(source, module.router)
        captured.append(gates[:, list(module.poison)].sum(-1))

    handles = [layer.register_forward_pre_hook(grab) for layer in model.adapted.values()]
    was_training = model.training
    modes = [layer.mode for layer in model.adapted.values()]
    # Only the gates are read: mode "all" skips the inference-time compensation, which costs an
    # [T, N, out] expert output per layer and does not change the router's softmax.
    model.set_stage("all")
    model.eval()
    try:
        for i in range(0, x.shape[0], batch_size):
            xb = x[i : i + batch_size]
            captured.clear()
            model(input_ids=xb, attention_mask=attention_mask(xb))
            mass = torch.stack(captured).mean(0).reshape(xb.shape)  # [b, L], mean over layers
            real = attention_mask(xb).bool()
            for name, group in (("noisy", flags_t[i : i + batch_size]), ("clean", None)):
                rows = group if group is not None else ~flags_t[i : i + batch_size]
                sel = real & rows[:, None]
                sums[name] += float(mass[sel].double().sum())
                counts[name] += int(sel.sum())
    finally:
        for handle in handles:
            handle.remove()
        for layer, mode in zip(model.adapted.values(), modes):
            layer.set_mode(mode)
        model.train(was_training)
    return {k: sums[k] / counts[k] if counts[k] else float("nan") for k in sums}


def _lora(base: nn.Module, rank: int, dropout: float) -> tuple[nn.Module, str]:
    if peft_available():
        from peft import LoraConfig
        from peft import get_peft_model as peft_get_peft_model

        config = LoraConfig(
            r=rank, lora_alpha=32, lora_dropout=dropout, target_modules=list(TARGETS)
        )
        return peft_get_peft_model(base, config), "peft"
    config = HydraLoRAConfig(
        r=rank, num_experts=1, lora_dropout=dropout, target_modules=list(TARGETS)
    )
    return get_peft_model(base, config), "lope N=1 (peft absent)"


def _embeddings_owner(model: nn.Module) -> nn.Module:
    return model.base_model if isinstance(model, LoPEModel) else model


def train_adapter(
    model: nn.Module,
    data: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    lr: float,
    seed: int,
    progress: bool = False,
    desc: str = "train",
):
    """One stage through ``neurips25_core.models.train`` with the settings every arm shares."""
    from neurips25_core.models import train

    return train(
        model,
        data,
        steps=steps,
        lr=lr,
        weight_decay=0.0,
        warmup=max(1, round(0.03 * steps)),
        min_lr_ratio=0.0,
        seed=seed,
        loss_fn=response_loss,
        progress=progress,
        desc=desc,
    )


@dataclasses.dataclass
class ArmData:
    """What every arm of one (noise rate, seed) run trains and is measured on."""

    train: list  # the noisy training set
    flags: list[bool]  # which training examples were corrupted
    hynoise_train: list  # the training set corrupted again by HyNoIse (Stage-I data)
    test: list  # clean test examples


def run_arms(
    base: nn.Module,
    data: ArmData,
    arms: Sequence[str],
    epochs: int,
    lr: float,
    seed: int,
    batch_size: int = 16,
    steps_per_stage: int | None = None,
    dropout: float = 0.05,
    progress: bool = False,
    router_examples: int = 1000,
) -> dict[str, dict]:
    """Train and measure ``arms`` from copies of ``base``; ``{arm: metrics}``.

    ``steps_per_stage`` (quick mode) overrides ``epochs``: every stage then takes that many steps.
    Metrics: ``exact_match``, ``response_loss`` (clean test), per-family exact match,
    ``train_seconds`` and ``steps``; LoPE arms add ``delta_A_stage1``/``delta_A_stage2`` (‖ΔA‖_F
    summed over layers) and ``router_mass_clean``/``router_mass_noisy`` (ω_D on the first
    ``router_examples`` training examples, which are in random order).
    """
    if isinstance(router_examples, bool) or not isinstance(router_examples, int):
        raise TypeError(f"router_examples: expected an int, got {type(router_examples).__name__}")
    if router_examples < 1:
        raise ValueError(f"router_examples: expected a positive int, got {router_examples}")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise ValueError(f"arms: unknown {unknown}, expected names from {ARMS}")
    x, y = encode(data.train)
    xh, yh = encode(data.hynoise_train)
    results: dict[str, dict] = {}

    def batches(xs, ys, stage_epochs, stage_seed):
        fn, steps = epoch_batches(xs, ys, batch_size, stage_epochs, stage_seed)
        if steps_per_stage is None:
            return fn, steps
        # Quick mode: a fixed number of steps per stage, scaled like the epochs (equal-steps arm).
        return fn, max(1, steps_per_stage * stage_epochs // epochs)

    def fresh(arm_seed: int) -> nn.Module:
        torch.manual_seed(arm_seed)
        return copy.deepcopy(base)

    for arm in arms:
        if arm in DERIVED:
            continue
        start = time.process_time()
        metrics: dict = {}
        if arm.startswith("lora"):
            rank = 4 if arm == "lora_neftune" else int(arm.removeprefix("lora_r"))
            model, impl = _lora(fresh(seed), rank, dropout)
            metrics["impl"] = impl
            fn, steps = batches(x, y, epochs, seed)
            ctx = contextlib.nullcontext()
            if arm == "lora_neftune":
                from transformers.integrations.neftune import (
                    activate_neftune,
                    deactivate_neftune,
                )

                target = _embeddings_owner(model)
                handle = activate_neftune(target, NEFTUNE_ALPHA)
                ctx = contextlib.ExitStack()
                ctx.callback(deactivate_neftune, target, handle)
            with ctx:
                train_adapter(model, fn, steps, lr, seed, progress, desc=arm)
            metrics["steps"] = steps
        elif arm.startswith("hydralora"):
            config = HydraLoRAConfig(r=4, lora_dropout=dropout, target_modules=list(TARGETS))
            torch.manual_seed(seed)
            model = get_peft_model(fresh(seed), config)
            if arm == "hydralora_hynoise":
                fn, steps = batches(xh, yh, epochs, seed)
                noise = HyNoise(seed=seed)
                with noise.embedding_noise(model.base_model):
                    train_adapter(model, fn, steps, lr, seed, progress, desc=arm)
            else:
                fn, steps = batches(x, y, epochs, seed)
                train_adapter(model, fn, steps, lr, seed, progress, desc=arm)
            metrics["steps"] = steps
        else:  # lope, lope_equal_steps
            from .train import train_lope

            stage_epochs = epochs if arm == "lope" else max(1, epochs // 2)
            config = LoPEConfig(r=4, lora_dropout=dropout, target_modules=list(TARGETS))
            torch.manual_seed(seed)
            model = get_peft_model(fresh(seed), config)
            noisy_fn, steps = batches(xh, yh, stage_epochs, seed)
            clean_fn, _ = batches(x, y, stage_epochs, seed + 1)
            trained = train_lope(
                model,
                noisy_fn,
                clean_fn,
                steps=steps,
                lr=lr,
                noise=HyNoise(seed=seed),
                loss_fn=response_loss,
                seed=seed,
                progress=progress,
            )
            metrics["steps"] = 2 * steps
            metrics["delta_A_stage1"] = trained.delta_A["stage1"]
            metrics["delta_A_stage2"] = trained.delta_A["stage2"]
            # The first training examples (random order, ~the corrupted fraction) suffice.
            mass = router_mass(model, x[:router_examples], data.flags[:router_examples])
            metrics["router_mass_clean"], metrics["router_mass_noisy"] = (
                mass["clean"],
                mass["noisy"],
            )
        model.eval()
        metrics.update(evaluate(model, data.test))
        metrics["train_seconds"] = time.process_time() - start
        results[arm] = metrics
        if arm == "lope":
            for derived, (mode, k) in (
                ("lope_unmasked", ("all", None)),
                ("lope_k0", ("inference", 0)),
            ):
                if derived not in arms:
                    continue
                model.set_stage(mode)
                saved = [layer.compensation_k for layer in model.adapted.values()]
                for layer in model.adapted.values():
                    layer.compensation_k = k if k is not None else layer.compensation_k
                model.eval()
                results[derived] = {**evaluate(model, data.test), "steps": metrics["steps"]}
                for layer, k_old in zip(model.adapted.values(), saved):
                    layer.compensation_k = k_old
                model.set_stage("inference")
    return results
