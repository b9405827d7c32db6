"""``train_lope``: Stage I on HyNoIse data, Stage II on the original data, then inference mode.

Both stages run through ``neurips25_core.models.train`` (warm-up + cosine, clipping, under
``enable_grad``), each with a fresh AdamW over the parameters ``set_stage`` returns, so rows of
``lora_B`` that a stage freezes (exact-zero gradient, weight decay 0) never move. Under an
initialised ``torch.distributed`` process group with more than one rank, each stage wraps the model
in ``DistributedDataParallel`` (built after ``set_stage``, so it tracks exactly that stage's
trainable parameters); every rank passes its own shard of each batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from neurips25_core.models import TrainResult, train

from .model import LoPEModel
from .noise import HyNoise

__all__ = ["LoPETrainResult", "train_lope"]


@dataclasses.dataclass
class LoPETrainResult:
    """Both stages' :class:`TrainResult` and ``‖ΔA‖_F`` per stage, summed over the adapted layers."""

    stage1: TrainResult
    stage2: TrainResult
    delta_A: dict[str, float]


def _maybe_ddp(model: LoPEModel):
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)
    return model


def _snapshot_A(model: LoPEModel) -> list[torch.Tensor]:
    return [layer.lora_A.detach().clone() for layer in model.adapted.values()]


def _delta(model: LoPEModel, before: list[torch.Tensor]) -> float:
    return float(
        sum(
            torch.linalg.vector_norm((layer.lora_A.detach() - a).double()) ** 2
            for layer, a in zip(model.adapted.values(), before)
        )
        ** 0.5
    )


def train_lope(
    model: LoPEModel,
    noisy_data: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    clean_data: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    lr: float = 2e-4,
    noise: HyNoise | None = None,
    loss_fn=None,
    seed: int = 614,
    progress: bool = False,
) -> LoPETrainResult:
    """Train a LoPE adapter in two stages and leave it in ``inference`` mode.

    Args:
        model: a :class:`LoPEModel` with at least one poisoning expert.
        noisy_data: ``step -> (x, y)`` batches of the HyNoIse-corrupted data (Stage I).
        clean_data: ``step -> (x, y)`` batches of the original data (Stage II).
        steps: optimizer steps per stage.
        lr: peak learning rate (spec: 2e-4 at 7B; warm-up 3 %, cosine, weight decay 0).
        noise: its ``embedding_noise`` is active during Stage I (``None``: no embedding noise).
        loss_fn: ``loss_fn(model, x, y) -> loss`` (default: causal-LM cross-entropy on logits).
        seed: batch-order seed passed to ``train``.
        progress: show progress bars.

    Returns:
        A :class:`LoPETrainResult`.
    """
    if not isinstance(model, LoPEModel):
        raise TypeError(f"model: expected a LoPEModel, got {type(model).__name__}")
    if not model.peft_config.poison_experts:
        raise ValueError("model: train_lope needs a poisoning expert (this is a HydraLoRA model)")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected a positive int, got {steps!r}")
    if noise is not None and not isinstance(noise, HyNoise):
        raise TypeError(f"noise: expected a HyNoise or None, got {type(noise).__name__}")
    warmup = max(1, round(0.03 * steps))
    common = dict(
        steps=steps,
        lr=lr,
        weight_decay=0.0,
        warmup=warmup,
        min_lr_ratio=0.0,
        seed=seed,
        loss_fn=loss_fn,
        progress=progress,
    )
    model.train()
    start = _snapshot_A(model)
    model.set_stage("stage1")
    if noise is not None:
        with noise.embedding_noise(model.base_model):
            stage1 = train(_maybe_ddp(model), noisy_data, desc="LoPE stage I", **common)
    else:
        stage1 = train(_maybe_ddp(model), noisy_data, desc="LoPE stage I", **common)
    middle = _snapshot_A(model)
    model.set_stage("stage2")
    stage2 = train(_maybe_ddp(model), clean_data, desc="LoPE stage II", **common)
    delta = {"stage1": _delta_between(start, middle), "stage2": _delta(model, middle)}
    model.set_stage("inference")
    model.eval()
    return LoPETrainResult(stage1=stage1, stage2=stage2, delta_A=delta)


def _delta_between(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return float(sum(torch.linalg.vector_norm((y - x).double()) ** 2 for x, y in zip(a, b)) ** 0.5)
