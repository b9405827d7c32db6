"""The reduced reproduction: a pretrained byte-level base, the arms at a common budget, the runs.

* :func:`mixed_corpus` — :func:`neurips25_core.data.stdlib_corpus` mixed with generic QA and
  arithmetic text in a *different* surface format from the tasks (``Facts. Q: … A: …`` and
  ``12+3*4=24``), so the prompts steer skills the base already has rather than teach new ones.
* :func:`pretrained_base` — a tiny Llama pretrained on it through
  :func:`neurips25_core.models.pretrained_tiny_llama` (cached by
  :func:`~neurips25_core.models.cached_checkpoint`, keyed by the config, the corpus fingerprint
  and every training argument).
* :func:`build_arm` — one arm (PT-MoE, its ablations, PT, DPT, SMoP, peft's PT and LoRA) on a
  fresh copy of the base, sized by :func:`ptmoe.budget.solve` to a common budget.
* :func:`run_arm` — :func:`ptmoe.train.fit` then :func:`ptmoe.train.evaluate` (per domain), with
  PT-MoE's routing statistics per domain on the evaluation set.
* :func:`mean_ci` — mean and Student-t 95 % confidence half-width over seeds (scipy).
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Sequence
from typing import Any

import torch

from .tasks import NAMES, QAExample

__all__ = [
    "ARMS",
    "base_config",
    "build_arm",
    "mean_ci",
    "mixed_corpus",
    "pretrain_format",
    "pretrain_text",
    "pretrained_base",
    "run_arm",
    "zero_shot",
]

#: Version of the synthetic pretraining text: part of the corpus fingerprint (and so the cache key).
PRETRAIN_TEXT_VERSION = 2


_CONSONANTS, _VOWELS = "bcdfghjklmnprstvz", "aeiou"
_THINGS = ["bike", "piano", "tent", "drum", "canoe", "sofa", "radio", "sled", "violin", "kettle"]
_LANGUAGES = ["Welsh", "Tamil", "Finnish", "Basque", "Zulu", "Thai", "Greek", "Malay", "Czech"]
_FRUITS = ["mango", "plum", "lemon", "melon", "peach", "grape", "kiwi", "pear", "fig", "lime"]


def _word(rng: random.Random) -> str:
    """A pronounceable made-up word (``"kiheha"``): values the base must copy, not memorise."""
    return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.randint(2, 3)))


def _person(rng: random.Random) -> str:
    return rng.choice(NAMES) if rng.random() < 0.5 else _word(rng).capitalize()


#: The pretraining QA relations: (fact, question, key, value). None of them is a task generator
#: (``tasks.IN_DOMAIN`` / ``OUT_OF_DOMAIN``): they teach the generic skill the tasks need —
#: find the fact about the asked key and copy its value — in the ``facts Q: … A: …`` format.
_RELATIONS: list[tuple[str, str, Any, Any]] = [
    (
        "{k} owns a {v}.",
        "What does {k} own?",
        _person,
        lambda r: r.choice(_THINGS) if r.random() < 0.5 else _word(r),
    ),
    (
        "{k} speaks {v}.",
        "Which language does {k} speak?",
        _person,
        lambda r: r.choice(_LANGUAGES) if r.random() < 0.5 else _word(r).capitalize(),
    ),
    (
        "The {k} costs {v} coins.",
        "How much does the {k} cost?",
        lambda r: r.choice(_FRUITS) if r.random() < 0.5 else _word(r),
        lambda r: str(r.randint(1, 999)),
    ),
    (
        "Box {k} holds a {v}.",
        "What is in box {k}?",
        lambda r: r.choice("ABCDEFGHJKLMNPRSTUVWXYZ") + str(r.randint(1, 99)),
        _word,
    ),
    (
        "{k}'s code is {v}.",
        "What is {k}'s code?",
        _person,
        lambda r: _word(r) if r.random() < 0.5 else str(r.randint(100, 9999)),
    ),
    ("Room {k} is for {v}.", "Who is room {k} for?", lambda r: str(r.randint(1, 500)), _person),
]

#: Facts per pretraining QA item (the tasks use 3–8 in domain) and questions asked about them.
PRETRAIN_FACTS = (2, 5)
PRETRAIN_QUESTIONS = 3


def _qa_line(rng: random.Random) -> str:
    """A generic QA item in the pretraining format: ``facts Q: question A: answer …``.

    2–5 facts of one relation (70 %) or of mixed relations (30 %) with distinct keys, then up to
    :data:`PRETRAIN_QUESTIONS` distinct questions about them (three answers per context: a
    denser retrieval signal than one per item, which a tiny base needs to learn it at all).
    """
    mixed = rng.random() < 0.3
    relation = rng.choice(_RELATIONS)
    facts, asked, keys = [], [], set()
    for _ in range(rng.randint(*PRETRAIN_FACTS)):
        fact, question, key, value = rng.choice(_RELATIONS) if mixed else relation
        k = key(rng)
        if k in keys:
            continue
        keys.add(k)
        v = value(rng)
        facts.append(fact.format(k=k, v=v))
        asked.append((question.format(k=k), v))
    picked = rng.sample(asked, min(PRETRAIN_QUESTIONS, len(asked)))  # distinct questions
    qa = "".join(f" Q: {q} A: {a}" for q, a in picked)
    return " ".join(facts) + qa + "\n"


def _arith_line(rng: random.Random) -> str:
    """Compact arithmetic (``12+3*4=24``), one to three operations, exact integer results."""
    a = rng.randint(1, 60)
    expr, value = str(a), a
    for _ in range(rng.randint(1, 3)):
        op = rng.choice("+-*/")
        if op == "+":
            b = rng.randint(1, 40)
            expr, value = f"{expr}+{b}", value + b
        elif op == "-":
            b = rng.randint(0, max(0, value))
            expr, value = f"{expr}-{b}", value - b
        elif op == "*":
            b = rng.randint(2, 5)
            expr, value = (
                f"({expr})*{b}" if "+" in expr or "-" in expr else f"{expr}*{b}",
                value * b,
            )
        else:
            divisors = [d for d in range(2, 6) if value % d == 0]
            if not divisors:
                continue
            b = rng.choice(divisors)
            expr = f"({expr})/{b}" if "+" in expr or "-" in expr else f"{expr}/{b}"
            value //= b
    who = rng.choice(NAMES)
    return rng.choice([f"{expr}={value}\n", f"{who} computes {expr}={value}\n"])


def pretrain_text(num_bytes: int, seed: int = 0) -> bytes:
    """About ``num_bytes`` of synthetic QA (85 %) and arithmetic (15 %) lines.

    Example:
        >>> text = pretrain_text(400, seed=0).decode()
        >>> " Q: " in text and " A: " in text and "=" in text
        True
    """
    if isinstance(num_bytes, bool) or not isinstance(num_bytes, int) or num_bytes < 1:
        raise ValueError(f"num_bytes: expected a positive int, got {num_bytes!r}")
    rng = random.Random(10_000 + seed)  # task examples use seeds 0..; keep these streams apart
    parts, size = [], 0
    while size < num_bytes:
        line = _qa_line(rng) if rng.random() < 0.85 else _arith_line(rng)
        parts.append(line)
        size += len(line)
    return "".join(parts).encode()


def mixed_corpus(stdlib_bytes: int = 1_000_000, synthetic_bytes: int = 3_000_000, seed: int = 0):
    """The first ``stdlib_bytes`` of the stdlib corpus's splits interleaved (in 4 KiB blocks) with
    ``synthetic_bytes`` of :func:`pretrain_text`; validation takes a tenth of each.

    Returns:
        A :class:`neurips25_core.data.Corpus` whose fingerprint covers the stdlib fingerprint, the
        sizes, the seed and :data:`PRETRAIN_TEXT_VERSION`.
    """
    from neurips25_core.data import Corpus, stdlib_corpus

    for name, v in (("stdlib_bytes", stdlib_bytes), ("synthetic_bytes", synthetic_bytes)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 40_960:
            raise ValueError(f"{name}: expected an int >= 40960, got {v!r}")
    base = stdlib_corpus()
    text = pretrain_text(synthetic_bytes + synthetic_bytes // 10, seed)
    synthetic = torch.frombuffer(bytearray(text), dtype=torch.uint8)

    def interleave(code: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        block = 4096
        out = []
        for i in range(0, max(len(code), len(text)), block):
            out += [code[i : i + block], text[i : i + block]]
        return torch.cat(out)

    n_val = stdlib_bytes // 10
    train = interleave(base.train[:stdlib_bytes], synthetic[:synthetic_bytes])
    val = interleave(base.val[:n_val], synthetic[synthetic_bytes:])
    fingerprint = hashlib.sha256(
        f"{base.fingerprint}:{stdlib_bytes}:{synthetic_bytes}:{seed}:v{PRETRAIN_TEXT_VERSION}".encode()
    ).hexdigest()[:16]
    return Corpus(
        train=train,
        val=val,
        train_files=base.train_files,
        val_files=base.val_files,
        fingerprint=f"ptmoe-mixed-{fingerprint}",
    )


def base_config(mode: str):
    """The base's ``LlamaConfig`` per mode (byte vocabulary, 1024 positions)."""
    from neurips25_core.models import tiny_llama_config

    sizes = {
        "smoke": dict(hidden_size=32, num_layers=1, num_heads=2),
        "quick": dict(hidden_size=64, num_layers=2, num_heads=4),
        "full": dict(hidden_size=128, num_layers=4, num_heads=4),
    }
    if mode not in sizes:
        raise ValueError(f"mode: expected one of {sorted(sizes)}, got {mode!r}")
    return tiny_llama_config(max_position_embeddings=1024, **sizes[mode])


#: Pretraining steps per mode (batch 8 × 256 bytes, lr 3e-3, warm-up + cosine). The hidden-64
#: base reaches 1.13 bits/byte and answers 15 % of pretraining-format questions (F1) zero-shot.
PRETRAIN_STEPS = {"smoke": 30, "quick": 2500, "full": 3000}


def pretrained_base(mode: str, progress: bool = True, steps: int | None = None):
    """The base for ``mode``, pretrained on :func:`mixed_corpus` (cached on disk)."""
    from neurips25_core.bench import single_thread
    from neurips25_core.models import pretrained_tiny_llama

    config = base_config(mode)
    steps = PRETRAIN_STEPS[mode] if steps is None else steps
    if mode == "smoke":
        corpus, batch, seq_len = mixed_corpus(100_000, 100_000), 4, 64
    else:
        corpus, batch, seq_len = mixed_corpus(), 8, 256
    with single_thread():  # tiny widths: one thread is faster, and kinder to a shared machine
        return pretrained_tiny_llama(
            config, steps=steps, corpus=corpus, batch_size=batch, seq_len=seq_len, progress=progress
        )


# ------------------------------------------------------------------------------------------ arms
#: Task descriptions whose byte embeddings seed the SVD init of PT-MoE, PT and DPT.
INIT_TEXT = {
    "qa": "Read the context and answer the question with a short span copied from it.",
    "math": "Solve the word problem step by step, then give the final number after ####.",
}

#: Every arm: (kind, settings). ``ptmoe_*`` are PT-MoE ablations; ``peft_*`` the peers.
ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    "ptmoe": ("ptmoe", dict(num_experts=2, routing="topk")),
    "pt": ("pt", {}),
    "dpt": ("dpt", {}),
    "smop": ("smop", dict(num_experts=2)),
    "peft_pt": ("peft_pt", {}),
    "peft_lora": ("peft_lora", {}),
    "ptmoe_n1": ("ptmoe", dict(num_experts=1, routing="topk")),
    "ptmoe_n4": ("ptmoe", dict(num_experts=4, routing="topk")),
    "ptmoe_soft": ("ptmoe", dict(num_experts=2, routing="soft")),
    "ptmoe_uniform": ("ptmoe", dict(num_experts=2, routing="uniform")),
}


def _byte_ids(text: str) -> torch.Tensor:
    return torch.tensor(list(text.encode()), dtype=torch.long)


def _lora_dims(base) -> int:
    """``Σ (d_in + d_out)`` over the q_proj and v_proj linears of ``base``."""
    return sum(
        m.in_features + m.out_features
        for name, m in base.named_modules()
        if name.endswith(("q_proj", "v_proj")) and isinstance(m, torch.nn.Linear)
    )


def build_arm(name: str, base, task: str, prompt_length: int = 40, seed: int = 0):
    """Wrap ``base`` (a fresh copy, frozen here) as arm ``name`` at PT's budget ``T·H``.

    PT-MoE and DPT take the rank that lands nearest ``T·H`` (:func:`ptmoe.budget.solve`), SMoP two
    prompts of ``T/2``; LoRA (q_proj, v_proj) takes the rank nearest 1.2 × ``T·H`` (more
    parameters than PT-MoE, as in the paper: r = 3 → 6,144 at H = 128 and 4 layers).

    Returns:
        ``(model, info)`` with ``info = {"kind", "size", "trainable"}``.

    Raises:
        ValueError: an unknown arm or task; ``ImportError`` for a peft arm without peft.
    """
    if name not in ARMS:
        raise ValueError(f"name: expected one of {sorted(ARMS)}, got {name!r}")
    if task not in INIT_TEXT:
        raise ValueError(f"task: expected one of {sorted(INIT_TEXT)}, got {task!r}")
    # Routers (nn.Linear) draw their init from the global RNG: seed it here, so an arm's init
    # depends on ``seed`` only, not on what ran before in the process.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _build_arm(name, base, task, prompt_length, seed)


def _build_arm(name: str, base, task: str, prompt_length: int, seed: int):
    from . import budget
    from .baselines import DecomposedPromptTuning, PromptTuning, SMoP, apply_prompt
    from .config import PTMoEConfig
    from .model import get_peft_model

    kind, opts = ARMS[name]
    hidden = base.get_input_embeddings().embedding_dim
    T = prompt_length
    target = T * hidden
    g = torch.Generator().manual_seed(seed)
    init_ids = _byte_ids(INIT_TEXT[task])
    emb = base.get_input_embeddings()
    if kind == "ptmoe":
        n = opts["num_experts"]
        counted = "dpt" if opts["routing"] == "uniform" and n == 1 else "ptmoe"
        rank = budget.solve(counted, target, hidden, T, num_experts=n, tolerance=0.1)["value"]
        rank = min(rank, T, hidden)
        config = PTMoEConfig(
            prompt_length=T,
            num_experts=n,
            rank=rank,
            routing=opts["routing"],
            init_text=INIT_TEXT[task],
        )
        model = get_peft_model(
            base, config, tokenizer=lambda text: {"input_ids": _byte_ids(text)}, generator=g
        )
        size = f"N={n}, R={rank}, {opts['routing']}"
    elif kind == "pt":
        model = apply_prompt(base, PromptTuning(emb, T, init_ids=init_ids, generator=g))
        size = f"T={T}"
    elif kind == "dpt":
        rank = budget.solve("dpt", target, hidden, T, tolerance=0.1)["value"]
        model = apply_prompt(
            base, DecomposedPromptTuning(emb, T, rank, init_ids=init_ids, generator=g)
        )
        size = f"R={rank}"
    elif kind == "smop":
        n = opts["num_experts"]
        model = apply_prompt(base, SMoP(emb, n, T // n, generator=g))
        size = f"{n}x{T // n}"
    else:
        import peft

        if kind == "peft_pt":
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)  # SAMPLE_VOCAB draws from the global RNG
                model = peft.get_peft_model(
                    base,
                    peft.PromptTuningConfig(
                        task_type="CAUSAL_LM",
                        num_virtual_tokens=T,
                        prompt_tuning_init="SAMPLE_VOCAB",
                    ),
                )
            size = f"T={T}"
        else:
            r = max(1, round(1.2 * target / _lora_dims(base)))
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                model = peft.get_peft_model(
                    base,
                    peft.LoraConfig(
                        task_type="CAUSAL_LM",
                        r=r,
                        lora_alpha=r,
                        lora_dropout=0.0,
                        target_modules=["q_proj", "v_proj"],
                    ),
                )
            size = f"r={r}, q/v"
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return model, {"kind": kind, "size": size, "trainable": trainable}


def run_arm(
    name: str,
    base_factory,
    task: str,
    train_examples: Sequence[QAExample],
    eval_sets: dict[str, Sequence[QAExample]],
    steps: int,
    lr: float,
    seed: int = 0,
    batch_size: int = 16,
    max_new_tokens: int = 16,
    progress: bool = False,
) -> dict[str, Any]:
    """Train arm ``name`` on a fresh base from ``base_factory()`` and score every evaluation set.

    Returns:
        ``{"arm", "lr", "seed", "info", "losses" (first/last 10 % means), "scores" {set: {domain:
        {metric: value}}}, "routing" {set: routing_stats} (routed arms), "seconds", "cpu_seconds"}``.
    """
    from .model import PromptTunedModel
    from .train import evaluate, fit

    wall, cpu = time.perf_counter(), time.process_time()
    base = base_factory()
    model, info = build_arm(name, base, task, seed=seed)
    torch.manual_seed(seed)  # router noise and dropout draw from the global RNG
    losses = fit(
        model, train_examples, steps, lr, batch_size=batch_size, seed=seed, progress=progress
    )
    tenth = max(1, steps // 10)
    out: dict[str, Any] = {
        "arm": name,
        "lr": lr,
        "seed": seed,
        "info": info,
        "loss_start": sum(losses[:tenth]) / tenth,
        "loss_end": sum(losses[-tenth:]) / tenth,
        "scores": {},
        "routing": {},
    }
    routed = isinstance(model, PromptTunedModel) and model.prompt_encoder.num_experts > 1
    for set_name, examples in eval_sets.items():
        if routed:
            model.routing_stats(reset=True)
        out["scores"][set_name] = evaluate(
            model, examples, metric=task, max_new_tokens=max_new_tokens
        )
        if routed:
            out["routing"][set_name] = model.routing_stats(reset=True)
    out["seconds"] = time.perf_counter() - wall
    out["cpu_seconds"] = time.process_time() - cpu
    return out


def pretrain_format(example: QAExample) -> QAExample:
    """A QA task example rewritten in the pretraining surface format (``facts Q: question A:``).

    Example:
        >>> from ptmoe.tasks import qa_examples
        >>> pretrain_format(qa_examples(["city"], 1, seed=0)[0]).source.endswith(" live? A:")
        True
    """
    facts, question = example.source.removeprefix("Context: ").split("\nQuestion: ")
    question = question.removesuffix("\nAnswer:")
    return QAExample(f"{facts} Q: {question} A:", example.answer, example.domain)


def zero_shot(base, task: str, eval_sets, max_new_tokens: int = 16) -> dict[str, Any]:
    """The frozen base's scores without any adapter: ``{set: {domain: metrics}}`` in the task
    format, plus (QA) ``"{set}@pretrain_format"`` — what a prompt has to steer from."""
    from .train import evaluate

    out = {}
    for name, examples in eval_sets.items():
        out[name] = evaluate(base, examples, metric=task, max_new_tokens=max_new_tokens)
        if task == "qa":
            rewritten = [pretrain_format(e) for e in examples]
            out[f"{name}@pretrain_format"] = evaluate(
                base, rewritten, metric=task, max_new_tokens=max_new_tokens
            )
    return out


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Mean and the Student-t half-width of its ``confidence`` interval (0 for one value).

    Example:
        >>> mean, half = mean_ci([0.5, 0.6, 0.7])
        >>> round(mean, 3), round(half, 3)
        (0.6, 0.248)
    """
    import statistics

    from scipy import stats

    values = [float(v) for v in values]
    if not values:
        raise ValueError("values: expected at least one value")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    sem = statistics.stdev(values) / len(values) ** 0.5
    return mean, float(stats.t.ppf(0.5 + confidence / 2, len(values) - 1) * sem)
