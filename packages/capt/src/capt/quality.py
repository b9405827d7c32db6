"""The reduced reproduction: a pretrained byte-level Llama, the arms on it, training and scoring.

* :func:`pretrained_base` — the tiny Llama of a mode through
  :func:`neurips25_core.models.pretrained_tiny_llama_for` (cached; trained on the stdlib corpus):
  smoke width 32 with 1 layer, quick width 64 with 2 layers (200 pretraining steps), full the core's standard width-128,
  4-layer model (the spec's base). Eager attention, so the slot-0 attention can be read.
* :data:`ARMS` / :func:`build_arm` — CaPT, its concat ablation, deep PT(1) and PT(1) on our hooks;
  peft's PT(20) (``SAMPLE_VOCAB``), P-tuning(20), prefix tuning(1) and LoRA r=4 on ``q_proj,
  v_proj`` from the ``peers`` extra. Every arm wraps its own copy of the same base.
* :func:`fit` / :func:`accuracy` — AdamW on the trainable parameters with 6 % warm-up and cosine
  decay (:func:`neurips25_core.models.warmup_cosine`), cross-entropy over the verbalizer bytes at
  the last position (``snippet + SEP → label byte``); accuracy = argmax over the verbalizer.
* :func:`finding_two` — Finding II at test time: the trained PT(20) prompts with the training-free
  instance token in front (:class:`capt.InstanceToken`), no retraining.
* :func:`mean_ci` — mean and Student-t 95 % half-width over seeds (scipy).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import torch
from torch import nn

from .analysis import prompt_attention
from .baselines import DeepPromptTuning, InstanceToken, PromptTuning
from .config import CapsuleConfig
from .model import get_peft_model
from .tasks import Task, verbalize

__all__ = [
    "ARMS",
    "PROMPT_SLOTS",
    "accuracy",
    "build_arm",
    "finding_two",
    "fit",
    "mean_ci",
    "peft_available",
    "pretrained_base",
    "slot_attention",
]

#: The leading slots each arm puts in front of the input (None: no slots in the sequence).
PROMPT_SLOTS = {
    "capt": 1,
    "capt_concat": 2,
    "deep_pt1": 1,
    "pt1": 1,
    "peft_pt20": 20,
    "peft_ptuning20": 20,
    "peft_prefix1": None,
    "peft_lora4": None,
}
ARMS = tuple(PROMPT_SLOTS)


def peft_available() -> bool:
    try:
        import peft  # noqa: F401
    except ImportError:
        return False
    return True


#: The base of each mode: (width, layers, heads) and pretraining overrides for the core helper.
BASES = {
    "smoke": dict(hidden_size=32, num_layers=1, num_heads=2),
    "quick": dict(hidden_size=64, num_layers=2, num_heads=4),
    "full": None,  # the core's standard tiny Llama: width 128, 4 layers, 4 heads, 600 steps
}
#: Sized so that ``--quick`` stays near 45 CPU seconds on an empty cache (pretraining included).
QUICK_PRETRAIN = dict(steps=200, batch_size=16, seq_len=128)


def pretrained_base(mode: str, progress: bool = True) -> nn.Module:
    """The cached pretrained byte Llama of ``mode`` (``"smoke"``, ``"quick"`` or ``"full"``)."""
    from neurips25_core.models import pretrained_tiny_llama_for, tiny_llama_config

    if mode not in BASES:
        raise ValueError(f"mode: expected one of {sorted(BASES)}, got {mode!r}")
    if BASES[mode] is None:
        model = pretrained_tiny_llama_for(mode, progress=progress)
    else:
        overrides = {"config": tiny_llama_config(**BASES[mode], max_position_embeddings=1024)}
        if mode == "quick":
            overrides.update(QUICK_PRETRAIN)
        model = pretrained_tiny_llama_for(mode, progress=progress, **overrides)
    model.set_attn_implementation("eager")
    return model


def _fresh(base: nn.Module) -> nn.Module:
    model = copy.deepcopy(base)
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def build_arm(name: str, base: nn.Module, seed: int = 0) -> nn.Module:
    """Arm ``name`` on a deep copy of ``base`` (frozen), its trainable part seeded by ``seed``."""
    if name not in PROMPT_SLOTS:
        raise ValueError(f"name: expected one of {ARMS}, got {name!r}")
    model = _fresh(base)
    g = torch.Generator().manual_seed(seed)
    ours: dict[str, Callable[[], CapsuleConfig]] = {
        "capt": CapsuleConfig,
        "capt_concat": lambda: CapsuleConfig(fusion="concat"),
        "deep_pt1": lambda: DeepPromptTuning(1),
        "pt1": lambda: PromptTuning(1),
    }
    if name in ours:
        return get_peft_model(model, ours[name](), generator=g)
    if not peft_available():
        raise ValueError(f"name: {name!r} needs peft (install the 'peers' extra)")
    import peft

    d = model.config.hidden_size
    configs = {
        "peft_pt20": lambda: peft.PromptTuningConfig(
            task_type="CAUSAL_LM", num_virtual_tokens=20, prompt_tuning_init="SAMPLE_VOCAB"
        ),
        "peft_ptuning20": lambda: peft.PromptEncoderConfig(
            task_type="CAUSAL_LM", num_virtual_tokens=20, encoder_hidden_size=d
        ),
        "peft_prefix1": lambda: peft.PrefixTuningConfig(
            task_type="CAUSAL_LM", num_virtual_tokens=1
        ),
        "peft_lora4": lambda: peft.LoraConfig(
            task_type="CAUSAL_LM",
            r=4,
            lora_alpha=8,
            lora_dropout=0.0,
            target_modules=["q_proj", "v_proj"],
        ),
    }
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return peft.get_peft_model(model, configs[name]())


def _trainable(model: nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _class_logits(model: nn.Module, ids: torch.Tensor, task: Task) -> torch.Tensor:
    return verbalize(model(input_ids=ids).logits, task.label_ids).float()


def fit(
    model: nn.Module,
    ids: torch.Tensor,
    labels: torch.Tensor,
    task: Task,
    steps: int,
    lr: float,
    batch_size: int = 16,
    seed: int = 0,
) -> dict:
    """Train ``model``'s trainable parameters; returns losses, step time and CPU seconds.

    Runs under ``torch.enable_grad()`` (an outer ``no_grad`` cannot turn training off).
    """
    from neurips25_core.models import warmup_cosine

    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected an int >= 1, got {steps!r}")
    if not (isinstance(lr, float) and lr > 0):
        raise ValueError(f"lr: expected a positive float, got {lr!r}")
    if ids.shape[0] != labels.shape[0]:
        raise ValueError(f"labels: expected {ids.shape[0]} labels, got {labels.shape[0]}")
    params = _trainable(model)
    if not params:
        raise ValueError("model: has no trainable parameters")
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = warmup_cosine(opt, steps, warmup=max(1, round(0.06 * steps)))
    g = torch.Generator().manual_seed(10_000 + seed)
    device = params[0].device
    losses = []
    model.train()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    with torch.enable_grad():
        for _ in range(steps):
            idx = torch.randint(0, ids.shape[0], (batch_size,), generator=g)
            x, y = ids[idx].to(device), labels[idx].to(device)
            loss = nn.functional.cross_entropy(_class_logits(model, x, task), y)
            loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
    wall = time.perf_counter() - wall0
    model.eval()
    k = max(1, min(20, steps // 5))
    return {
        "loss_start": sum(losses[:k]) / k,
        "loss_end": sum(losses[-k:]) / k,
        "step_seconds": wall / steps,
        "cpu_seconds": time.process_time() - cpu0,
        "trainable": sum(p.numel() for p in params),
    }


@torch.no_grad()
def accuracy(
    model: nn.Module, ids: torch.Tensor, labels: torch.Tensor, task: Task, batch_size: int = 100
) -> float:
    """Fraction of examples whose argmax over the verbalizer bytes is the label."""
    model.eval()
    device = next(model.parameters()).device
    correct = 0
    for i in range(0, ids.shape[0], batch_size):
        pred = _class_logits(model, ids[i : i + batch_size].to(device), task).argmax(-1).cpu()
        correct += int((pred == labels[i : i + batch_size]).sum())
    return correct / ids.shape[0]


def finding_two(
    trained_pt: nn.Module, base: nn.Module, ids: torch.Tensor, labels: torch.Tensor, task: Task
) -> float:
    """Accuracy of a trained (peft or our) PT(n) with the instance token prepended, no retraining."""
    if hasattr(trained_pt, "prompt_encoder"):  # peft PromptTuning: copy its prompts into ours
        weight = trained_pt.prompt_encoder["default"].embedding.weight.detach()
        ours = get_peft_model(_fresh(base).to(weight.device), PromptTuning(weight.shape[0]))
        with torch.no_grad():
            ours.capsules[0].copy_(weight)
    else:
        ours = trained_pt
    return accuracy(InstanceToken().apply(ours), ids, labels, task)


def slot_attention(model: nn.Module, ids: torch.Tensor, n_prompt: int) -> list[float]:
    """Per layer, the attention mass the input tokens put on the first slot (eager)."""
    ids = ids.to(next(model.parameters()).device)
    out = prompt_attention(model, {"input_ids": ids}, n_prompt, keys=[0])
    return [out[layer][0] for layer in sorted(out)]


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and Student-t 95 % confidence half-width (0 for one value)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    sd = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    return mean, float(stats.t.ppf(0.975, n - 1) * sd / n**0.5)
