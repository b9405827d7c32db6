"""PostNAS: a frozen-MLP once-for-all supernet, beam search for full-attention placement, convert.

* :class:`Supernet` — every decoder layer of a (copied) transformers causal LM holds its frozen
  pretrained attention *and* a new linear block; ``set_layout(mask)`` picks the path per layer
  (1 = full attention). MLPs, embeddings, norms and the attentions are frozen.
* :func:`train_supernet` — distillation from the original model (logit KL at τ = 1 plus the MSE of
  the final hidden state), a random path per layer at every step drawn from one seeded generator,
  so under ``torch.distributed`` every rank trains the same sub-network (DDP averages the grads).
* :func:`beam_search` / :func:`exhaustive_search` — sets of k full-attention layers scored with
  the supernet by an ``objective(model) -> float`` (higher is better), e.g.
  :func:`lm_objective` or :func:`recall_objective`.
* :func:`convert` — a hybrid model: full attention where ``layout`` says 1 (or ``"swa"`` for a
  sliding window), a linear block elsewhere; :func:`hybrid_cache` is its explicit
  ``transformers.Cache`` (``DynamicLayer`` / ``DynamicSlidingWindowLayer`` for attention,
  ``LinearAttentionLayer`` for the blocks), :func:`greedy_generate` decodes with it.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "Supernet",
    "beam_search",
    "convert",
    "distillation_loss",
    "exhaustive_search",
    "greedy_generate",
    "hybrid_cache",
    "lm_objective",
    "recall_objective",
    "train_supernet",
]


def _decoder_layers(model: nn.Module) -> nn.ModuleList:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not all(
        hasattr(lay, "self_attn") for lay in layers
    ):
        raise TypeError(
            f"model: expected a transformers decoder LM with model.model.layers[i].self_attn (Qwen2/Llama), got {type(model).__name__}"
        )
    return layers


class SuperMixer(nn.Module):
    """One supernet layer's token mixer: the frozen attention or the new linear block."""

    def __init__(self, attention: nn.Module, linear: nn.Module):
        super().__init__()
        self.attention = attention
        self.linear = linear
        self.use_full = True

    def forward(
        self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs
    ):
        if self.use_full:
            return self.attention(
                hidden_states, position_embeddings, attention_mask, cache=cache, **kwargs
            )
        return self.linear(
            hidden_states, position_embeddings, attention_mask, cache=cache, **kwargs
        )


def _check_layout(layout, L: int, name: str = "layout") -> tuple[int, ...]:
    if isinstance(layout, torch.Tensor):
        layout = layout.tolist()
    if isinstance(layout, (str, bytes)) or not isinstance(layout, Sequence):
        raise TypeError(
            f"{name}: expected a sequence of {L} entries (1 = full attention, 0 = linear block), got {type(layout).__name__}"
        )
    if len(layout) != L:
        raise ValueError(f"{name}: expected {L} entries (one per layer), got {len(layout)}")
    out = []
    for v in layout:
        if v in (0, 1, True, False):
            out.append(int(v))
        else:
            raise ValueError(f"{name}: entries must be 0/1 (1 = full attention), got {v!r}")
    return tuple(out)


class Supernet(nn.Module):
    """A copy of ``model`` whose every layer holds its frozen attention and a new linear block.

    Args:
        model: a transformers decoder LM (Qwen2/Llama layout: ``model.model.layers[i].self_attn``);
            it is deep-copied, the original is left untouched (use it as the teacher).
        block_factory: ``block_factory(config, layer_idx) -> nn.Module`` with the attention
            signature (e.g. a :class:`~jetnemotron.layers.JetBlock`).

    Only the linear blocks train: every parameter of the copied model is frozen.

    Example:
        >>> import torch
        >>> from transformers import Qwen2Config, Qwen2ForCausalLM
        >>> from jetnemotron.layers import JetBlock
        >>> cfg = Qwen2Config(
        ...     vocab_size=64,
        ...     hidden_size=32,
        ...     intermediate_size=64,
        ...     num_hidden_layers=2,
        ...     num_attention_heads=2,
        ...     num_key_value_heads=1,
        ... )
        >>> teacher = Qwen2ForCausalLM(cfg)
        >>> net = Supernet(teacher, lambda c, i: JetBlock(c.hidden_size, 2, 8, 16, layer_idx=i))
        >>> net.set_layout([1, 0]).layout
        (1, 0)
    """

    def __init__(self, model: nn.Module, block_factory: Callable[[object, int], nn.Module]):
        super().__init__()
        if not callable(block_factory):
            raise TypeError(
                f"block_factory: expected a callable (config, layer_idx) -> module, got {type(block_factory).__name__}"
            )
        model = copy.deepcopy(model)
        layers = _decoder_layers(model)
        for p in model.parameters():
            p.requires_grad_(False)
        ref = next(model.parameters())
        for i, layer in enumerate(layers):
            block = block_factory(model.config, i).to(device=ref.device, dtype=ref.dtype)
            layer.self_attn = SuperMixer(layer.self_attn, block)
        model.config.use_cache = False  # a DynamicCache cannot hold the blocks' states
        self.model = model
        self.num_layers = len(layers)

    @property
    def config(self):
        return self.model.config

    @property
    def mixers(self) -> list[SuperMixer]:
        return [layer.self_attn for layer in self.model.model.layers]

    @property
    def layout(self) -> tuple[int, ...]:
        return tuple(int(m.use_full) for m in self.mixers)

    def set_layout(self, mask) -> Supernet:
        """Pick the path of every layer: ``mask[i] = 1`` full attention, 0 the linear block."""
        layout = _check_layout(mask, self.num_layers, "mask")
        for m, v in zip(self.mixers, layout, strict=True):
            m.use_full = bool(v)
        return self

    def block_parameters(self) -> list[nn.Parameter]:
        """The trainable parameters (those of the linear blocks)."""
        return [p for m in self.mixers for p in m.linear.parameters() if p.requires_grad]

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)


def distillation_loss(
    student_out, teacher_out, kl_weight: float = 1.0, hidden_weight: float = 1.0
) -> torch.Tensor:
    """Logit KL(teacher ‖ student) at τ = 1, per token, plus MSE of the final hidden states."""
    s = student_out.logits.float()
    t = teacher_out.logits.float()
    kl = (
        F.kl_div(F.log_softmax(s, -1), F.log_softmax(t, -1), log_target=True, reduction="none")
        .sum(-1)
        .mean()
    )
    loss = kl_weight * kl
    if hidden_weight:
        loss = loss + hidden_weight * F.mse_loss(
            student_out.hidden_states[-1].float(), teacher_out.hidden_states[-1].float()
        )
    return loss


def _batch_fn(batches) -> Callable[[int], torch.Tensor]:
    if callable(batches):
        return batches
    if isinstance(batches, torch.Tensor):
        if batches.dim() != 3:
            raise ValueError(
                f"batches: a tensor must be [steps, B, T] token ids, got shape {list(batches.shape)}"
            )
        return lambda step: batches[step % batches.shape[0]]
    if isinstance(batches, Iterable):
        it = iter(batches)
        return lambda step: next(it)
    raise TypeError(
        f"batches: expected a callable step -> ids, a [steps, B, T] tensor or an iterable, got {type(batches).__name__}"
    )


def train_supernet(
    supernet: Supernet,
    teacher: nn.Module,
    batches,
    *,
    steps: int,
    sampler: str = "bernoulli",
    p_full: float = 0.5,
    lr: float = 1e-3,
    kl_weight: float = 1.0,
    hidden_weight: float = 1.0,
    weight_decay: float = 0.0,
    grad_clip: float | None = 1.0,
    seed: int = 0,
    progress: bool = True,
    desc: str = "supernet",
) -> list[float]:
    """Distil the teacher into the supernet's linear blocks with a random path per layer per step.

    Args:
        supernet: a :class:`Supernet` (only its linear blocks train).
        teacher: the original model (frozen, evaluated under ``no_grad``).
        batches: ``step -> ids [B, T]``, a ``[steps, B, T]`` tensor or an iterable of ids; under
            ``torch.distributed`` each rank passes its own shard.
        steps: optimizer steps.
        sampler: ``"bernoulli"`` (each layer full with probability ``p_full``), ``"all_linear"``
            (train the all-linear path only; ``p_full`` ignored) or ``"fixed"`` (keep the current
            layout: stage-1 distillation of one architecture).
        p_full: probability of the full-attention path per layer.
        lr: AdamW peak LR (warm-up + cosine).
        kl_weight, hidden_weight: weights of the logit KL and the final-hidden MSE.
        seed: seeds the path sampler (the same on every rank).

    Returns:
        The per-step losses (this rank's).
    """
    from neurips25_core.models import warmup_cosine
    from neurips25_core.progress import progress_bar

    if not isinstance(supernet, Supernet):
        raise TypeError(f"supernet: expected a Supernet, got {type(supernet).__name__}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected an int >= 1, got {steps!r}")
    if sampler not in ("bernoulli", "all_linear", "fixed"):
        raise ValueError(f"sampler: expected 'bernoulli', 'all_linear' or 'fixed', got {sampler!r}")
    if not (isinstance(p_full, (int, float)) and 0.0 <= p_full <= 1.0):
        raise ValueError(f"p_full: expected a probability in [0, 1], got {p_full!r}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr: expected a finite float > 0, got {lr!r}")
    next_batch = _batch_fn(batches)
    params = supernet.block_parameters()
    if not params:
        raise ValueError("supernet: no trainable linear-block parameter")
    net: nn.Module = supernet.model
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if distributed:
        net = nn.parallel.DistributedDataParallel(net, find_unused_parameters=True)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95))
    sched = warmup_cosine(opt, steps, max(1, steps // 10), 0.1)
    gen = torch.Generator().manual_seed(seed)  # one shared seed: the same path on every rank
    teacher.eval()
    losses = []
    fixed = supernet.layout
    with torch.enable_grad(), progress_bar(total=steps, desc=desc, enabled=progress) as bar:
        net.train()
        for step in range(steps):
            if sampler == "bernoulli":
                layout = (torch.rand(supernet.num_layers, generator=gen) < p_full).int().tolist()
            elif sampler == "all_linear":
                layout = [0] * supernet.num_layers
            else:
                layout = fixed
            supernet.set_layout(layout)
            ids = next_batch(step)
            if all(layout):
                # The all-attention path is the teacher itself: nothing to train, loss exactly 0.
                # Every rank draws the same path, so every rank skips this step together.
                losses.append(0.0)
                sched.step()
                bar.update(1)
                continue
            with torch.no_grad():
                t_out = teacher(input_ids=ids, output_hidden_states=True, use_cache=False)
            s_out = net(input_ids=ids, output_hidden_states=True, use_cache=False)
            loss = distillation_loss(s_out, t_out, kl_weight, hidden_weight)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            opt.step()
            sched.step()
            losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}")
    net.eval()
    supernet.set_layout(fixed)
    return losses


def lm_objective(
    input_ids: torch.Tensor, labels: torch.Tensor | None = None
) -> Callable[[nn.Module], float]:
    """Objective: minus the mean next-token loss on ``input_ids`` (labels default: shifted ids;
    positions labelled −100 are ignored, so answer-only labels give the paper's answer loss)."""

    @torch.no_grad()
    def objective(model: nn.Module) -> float:
        logits = model(input_ids=input_ids, use_cache=False).logits.float()
        if labels is None:
            return -F.cross_entropy(logits[:, :-1].flatten(0, 1), input_ids[:, 1:].flatten()).item()
        return -F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100).item()

    return objective


def recall_objective(input_ids: torch.Tensor, labels: torch.Tensor) -> Callable[[nn.Module], float]:
    """Objective: the accuracy of greedy predictions at the positions whose label is not −100."""

    @torch.no_grad()
    def objective(model: nn.Module) -> float:
        pred = model(input_ids=input_ids, use_cache=False).logits.argmax(-1)
        mask = labels != -100
        return (pred[mask] == labels[mask]).float().mean().item()

    return objective


def _check_search(supernet, k, beam_width=1):
    if not isinstance(supernet, Supernet):
        raise TypeError(f"supernet: expected a Supernet, got {type(supernet).__name__}")
    L = supernet.num_layers
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k: expected an int >= 0, got {k!r}")
    if k > L:
        raise ValueError(f"k: expected at most L = {L} full-attention layers, got {k}")
    if isinstance(beam_width, bool) or not isinstance(beam_width, int) or beam_width < 1:
        raise ValueError(f"beam_width: expected an int >= 1, got {beam_width!r}")


def _layout(layers, L) -> tuple[int, ...]:
    return tuple(int(i in layers) for i in range(L))


def _score(supernet, layers, objective, table) -> float:
    key = tuple(sorted(layers))
    if key not in table:
        supernet.set_layout(_layout(layers, supernet.num_layers))
        table[key] = float(objective(supernet))
    return table[key]


def beam_search(
    supernet: Supernet, k: int, *, beam_width: int = 4, objective: Callable[[nn.Module], float]
):
    """Beam search over sets of k full-attention layers (higher objective is better).

    Starts from the empty set, adds one layer per round to every beam, scores each new set once
    with the supernet and keeps the best ``beam_width``. With ``beam_width >= max_r C(L, r)`` for
    r <= k nothing is pruned and the result equals :func:`exhaustive_search`.

    Returns:
        ``(layout, table)``: the best layout (tuple of L 0/1) and ``{layers: score}`` of every set
        scored (layers as sorted tuples).
    """
    _check_search(supernet, k, beam_width)
    before = supernet.layout
    table: dict[tuple[int, ...], float] = {}
    beams: list[tuple[int, ...]] = [()]
    for _ in range(k):
        candidates = sorted(
            {
                tuple(sorted((*b, i)))
                for b in beams
                for i in range(supernet.num_layers)
                if i not in b
            }
        )
        scored = [(_score(supernet, c, objective, table), c) for c in candidates]
        scored.sort(key=lambda sc: (-sc[0], sc[1]))
        beams = [c for _, c in scored[:beam_width]]
    if k == 0:
        _score(supernet, (), objective, table)
    supernet.set_layout(before)
    return _layout(beams[0], supernet.num_layers), table


def exhaustive_search(supernet: Supernet, k: int, *, objective: Callable[[nn.Module], float]):
    """Score every set of k full-attention layers; returns ``(best layout, {layers: score})``."""
    _check_search(supernet, k)
    before = supernet.layout
    table: dict[tuple[int, ...], float] = {}
    for c in itertools.combinations(range(supernet.num_layers), k):
        _score(supernet, c, objective, table)
    supernet.set_layout(before)
    best = min(table, key=lambda c: (-table[c], c))
    return _layout(best, supernet.num_layers), table


def convert(
    model: nn.Module,
    layout,
    *,
    blocks_from: Supernet | None = None,
    block_factory: Callable[[object, int], nn.Module] | None = None,
    sliding_window: int | None = None,
) -> nn.Module:
    """A hybrid copy of ``model``: full attention where ``layout[i]`` is 1, sliding-window attention
    where it is ``"swa"`` (window ``sliding_window``, keys including the current token), and a
    linear block elsewhere — copied from ``blocks_from`` (a trained supernet) or new from
    ``block_factory``. MLPs, embeddings and norms are the original ones (copied).

    Decode with :func:`hybrid_cache` (``greedy_generate`` does): the default ``DynamicCache`` has
    no conv/recurrent state for the linear blocks.
    """
    layers = _decoder_layers(model)
    L = len(layers)
    if isinstance(layout, torch.Tensor):
        layout = layout.tolist()
    if not isinstance(layout, Sequence) or len(layout) != L:
        raise ValueError(f"layout: expected {L} entries (1 full, 'swa', 0 linear), got {layout!r}")
    for v in layout:
        if v not in (0, 1, "swa", True, False):
            raise ValueError(
                f"layout: entries must be 1 (full), 'swa' or 0 (linear block), got {v!r}"
            )
    if (blocks_from is None) == (block_factory is None):
        raise ValueError("blocks_from/block_factory: pass exactly one source of linear blocks")
    if blocks_from is not None and blocks_from.num_layers != L:
        raise ValueError(
            f"blocks_from: a supernet of {blocks_from.num_layers} layers does not fit a model of {L}"
        )
    if "swa" in layout and not (isinstance(sliding_window, int) and sliding_window >= 1):
        raise ValueError(
            f"sliding_window: expected an int >= 1 for 'swa' layers, got {sliding_window!r}"
        )
    hybrid = copy.deepcopy(model)
    cfg = hybrid.config
    types = list(getattr(cfg, "layer_types", None) or ["full_attention"] * L)
    ref = next(hybrid.parameters())
    for i, (layer, v) in enumerate(zip(hybrid.model.layers, layout, strict=True)):
        if v == "swa":
            types[i] = "sliding_attention"
            layer.self_attn.sliding_window = sliding_window
            if hasattr(layer, "attention_type"):
                layer.attention_type = "sliding_attention"
        elif not v:
            # Linear blocks stay "full_attention" in layer_types: they get the full causal mask,
            # whose last row gives them the padding.
            block = (
                copy.deepcopy(blocks_from.mixers[i].linear)
                if blocks_from is not None
                else block_factory(cfg, i)
            )
            layer.self_attn = block.to(device=ref.device, dtype=ref.dtype)
    if "swa" in layout:
        cfg.sliding_window = sliding_window
        cfg.use_sliding_window = True
    cfg.layer_types = types
    # A default DynamicCache cannot hold the blocks' states: caching is opt-in via hybrid_cache.
    cfg.use_cache = False
    if hasattr(hybrid.model, "has_sliding_layers"):
        hybrid.model.has_sliding_layers = "sliding_attention" in types
    hybrid.jet_layout = tuple(layout)
    return hybrid


def hybrid_cache(model: nn.Module):
    """The explicit ``transformers.Cache`` of a hybrid model made by :func:`convert`."""
    from transformers.cache_utils import (
        Cache,
        DynamicLayer,
        DynamicSlidingWindowLayer,
        LinearAttentionLayer,
    )

    layers = []
    for layer in _decoder_layers(model):
        attn = layer.self_attn
        if not hasattr(attn, "q_proj") or hasattr(attn, "gen_up") or hasattr(attn, "A_log"):
            layers.append(LinearAttentionLayer())
        elif getattr(attn, "sliding_window", None):
            layers.append(DynamicSlidingWindowLayer(sliding_window=attn.sliding_window))
        else:
            layers.append(DynamicLayer())
    if all(isinstance(x, LinearAttentionLayer) for x in layers):
        raise ValueError(
            "model: an all-linear model needs no KV cache; transformers' Cache needs one attention layer to count positions"
        )
    return Cache(layers=layers)


@torch.no_grad()
def greedy_generate(
    model: nn.Module, input_ids: torch.Tensor, max_new_tokens: int, cache=None
) -> torch.Tensor:
    """Greedy decoding with an explicit cache (:func:`hybrid_cache` for hybrid models)."""
    cache = hybrid_cache(model) if cache is None else cache
    out = model(input_ids=input_ids, cache=cache, use_cache=True)
    tokens = [out.logits[:, -1].argmax(-1, keepdim=True)]
    for _ in range(max_new_tokens - 1):
        out = model(input_ids=tokens[-1], cache=cache, use_cache=True)
        tokens.append(out.logits[:, -1].argmax(-1, keepdim=True))
    return torch.cat(tokens, dim=1)
