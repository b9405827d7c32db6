"""``Press``: compress each layer's KV cache at the end of prefill, for transformers causal LMs.

Usage::

    press = andpro.Press(andpro.AnDProScorer(), budget=128)
    with press(model) as cache:
        out = model(input_ids, cache=cache)  # prefill, then compression
        nxt = model(out.logits[:, -1:].argmax(-1), cache=cache)  # decodes on the kept tokens

Inside the context, each ``layer.self_attn`` carries a forward pre-hook and a forward hook
(``with_kwargs=True``), and the model's attention implementation is switched to ``"andpro"``
(:mod:`andpro.attention`), which calls eager or SDPA math under the per-head mask. Everything is
undone on exit, also on an exception.

Prefill is detected as "this layer's cache was empty before this forward" (never via
``cache_position``). Prefill attention itself is full; the window queries are captured from the
attention call (so ``q_norm``/RoPE follow the model's own query path), the scorer scores the cached
keys/values, :func:`andpro.select.select_keep` picks exactly ``budget`` tokens per KV head on average,
and the :class:`~andpro.cache.PressLayer` compacts them.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

import torch
from transformers import DynamicCache

from andpro import attention as attn_mod
from andpro.cache import PressCache
from andpro.scorers.base import Scorer, ScoringContext
from andpro.select import HEAD_BUDGETS, resolve_budget, select_keep

__all__ = ["SUPPORTED_MODEL_TYPES", "Press"]

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
_ACTIVE_MODELS: set[int] = set()
_REGISTRATIONS = [0]


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name}: expected an int >= {low}, got {value}")
    return value


def _forward_arguments(module: torch.nn.Module) -> list[str]:
    """Names of ``module.forward``'s positional parameters, in order (for positional arguments)."""
    names = []
    for p in inspect.signature(module.forward).parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
    return names


def _check_mask(mask) -> None:
    """Refuse any padding mask: scores, budgets and positions would count pad tokens."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"attention_mask: expected a tensor or None, got {type(mask).__name__}")
    if mask.dim() == 2:
        if not bool(mask.bool().all()):
            raise ValueError(
                "attention_mask: padded batches are not supported by the press (scores, budgets and "
                "positions would count pad tokens); compress one unpadded prompt per row"
            )
        return
    raise ValueError(
        f"attention_mask: the press builds its own per-head causal mask; got a {mask.dim()}-D mask "
        "(pass none, or an all-ones [B, L] mask)"
    )


class Press:
    """KV-cache eviction at prefill with a pluggable scorer.

    Args:
        scorer: a :class:`~andpro.scorers.Scorer`. Its ``gqa_reduce`` decides the cache layout:
            ``"sum"``/``"mean"`` keep one budget per KV head (the GQA group's scores reduced),
            ``"per_qhead"`` repeats KV to the query heads (the official ``repeat_kv`` layout) and
            keeps ``budget`` per query head.
        budget: tokens kept per head (on average across a layer's heads for ``"adaptive"``), sinks
            and window included. An int, or a float in (0, 1] meaning ``floor(budget * L)``.
            ``budget == L`` keeps everything; ``budget > L`` or ``< sink_tokens + window`` raises.
        window: trailing prompt tokens always kept; their queries are the observation window.
        pool_kernel: odd pooling kernel along keys (max-pool for AnDPro).
        chunk_size: candidates are selected in chunks of this many tokens (aligned from the sinks).
        sink_tokens: leading tokens always kept.
        head_budget: ``"adaptive"`` (one top-k across a layer's heads, no floor) or ``"uniform"``.

    Inside the context the model can be called as usual: ``model(ids)``, ``model.generate(ids)``,
    ``model.model(ids)``. A forward that gets no cache (with caching on) or an empty
    ``DynamicCache`` (what ``generate`` creates) gets a :class:`PressCache` in its place: the yielded
    one while it is still empty, else a fresh one. The returned ``cache`` of the output is then
    compressed, and ``generate`` decodes on the kept tokens. Passing the yielded cache explicitly
    (``cache=cache``) works too; ``use_cache=False`` runs full attention and compresses nothing. A
    non-empty foreign cache raises ``TypeError``; any padding mask (keyword or positional, through
    the causal LM or its ``model.model``) raises ``ValueError``.

    Attributes:
        stats: one dict per compressed layer and prefill, in order: ``layer``, ``length``,
            ``budget``, ``kept`` (``[B, H]`` counts).

    Example:
        >>> import torch
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> from andpro import AnDProScorer
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> config = LlamaConfig(
        ...     hidden_size=32,
        ...     num_hidden_layers=2,
        ...     num_attention_heads=2,
        ...     num_key_value_heads=1,
        ...     intermediate_size=64,
        ...     vocab_size=64,
        ... )
        >>> model = LlamaForCausalLM(config).eval()
        >>> ids = torch.randint(0, 64, (1, 100))
        >>> press = Press(AnDProScorer(), budget=48, head_budget="uniform")
        >>> with torch.no_grad(), press(model):
        ...     out = model.generate(ids, max_new_tokens=4, do_sample=False)
        >>> out.shape, [s["kept"].tolist() for s in press.stats]
        (torch.Size([1, 104]), [[[48]], [[48]]])
        >>> with torch.no_grad(), press(model) as cache:  # the explicit form
        ...     _ = model(ids, cache=cache)
        ...     cache.get_seq_length(), cache.kept_counts_per_layer()
        (100, [[[48]], [[48]]])
    """

    def __init__(
        self,
        scorer: Scorer,
        budget: int | float,
        window: int = 32,
        pool_kernel: int = 7,
        chunk_size: int = 4,
        sink_tokens: int = 4,
        head_budget: str = "adaptive",
    ) -> None:
        if not isinstance(scorer, Scorer):
            raise TypeError(
                f"scorer: expected an andpro.scorers.Scorer, got {type(scorer).__name__}"
            )
        self.window = _check_int("window", window, 1)
        self.chunk_size = _check_int("chunk_size", chunk_size, 1)
        self.sink_tokens = _check_int("sink_tokens", sink_tokens, 0)
        _check_int("pool_kernel", pool_kernel, 1)
        if pool_kernel % 2 == 0:
            raise ValueError(f"pool_kernel: expected an odd int, got {pool_kernel}")
        self.pool_kernel = pool_kernel
        if head_budget not in HEAD_BUDGETS:
            raise ValueError(f"head_budget: expected one of {HEAD_BUDGETS}, got {head_budget!r}")
        self.head_budget = head_budget
        if isinstance(budget, bool) or not isinstance(budget, (int, float)):
            raise TypeError(
                f"budget: expected an int or a float in (0, 1], got {type(budget).__name__}"
            )
        if isinstance(budget, float) and not 0.0 < budget <= 1.0:
            raise ValueError(
                f"budget: a float budget is a fraction of the context in (0, 1], got {budget}"
            )
        if isinstance(budget, int) and budget < sink_tokens + window:
            raise ValueError(
                f"budget: {budget} is below sink_tokens + window = {sink_tokens + window}"
            )
        self.budget = budget
        self.scorer = scorer
        self.stats: list[dict] = []

    def __repr__(self) -> str:
        return (
            f"Press({self.scorer!r}, budget={self.budget}, window={self.window}, pool_kernel={self.pool_kernel}, "
            f"chunk_size={self.chunk_size}, sink_tokens={self.sink_tokens}, head_budget={self.head_budget!r})"
        )

    # ------------------------------------------------------------------------------------- model checks

    @staticmethod
    def _attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
        config = getattr(model, "config", None)
        if config is None:
            raise TypeError(
                f"model: expected a transformers PreTrainedModel, got {type(model).__name__}"
            )
        if (
            getattr(config, "is_encoder_decoder", False)
            or getattr(config, "is_causal", True) is False
        ):
            raise ValueError(
                f"model: the press needs a causal decoder-only LM; {type(model).__name__} is not causal"
            )
        model_type = getattr(config, "model_type", None)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"model: unsupported model type {model_type!r}; supported: {SUPPORTED_MODEL_TYPES}"
            )
        impl = getattr(config, "_attn_implementation", None) or "eager"
        if impl not in attn_mod.SUPPORTED_IMPLEMENTATIONS:
            raise ValueError(
                f"model: attention implementation {impl!r} is not supported; use one of "
                f"{attn_mod.SUPPORTED_IMPLEMENTATIONS} (attn_implementation=... when building the model)"
            )
        decoder = Press._decoder(model)
        layers = getattr(decoder, "layers", None)
        if layers is None:
            raise ValueError(f"model: no decoder layers found on {type(model).__name__}")
        modules = [layer.self_attn for layer in layers]
        for m in modules:
            if not hasattr(m, "layer_idx"):
                raise ValueError(f"model: attention module {type(m).__name__} has no layer_idx")
        return modules

    @staticmethod
    def _decoder(model: torch.nn.Module) -> torch.nn.Module:
        if hasattr(model, "get_decoder"):
            decoder = model.get_decoder()
            if decoder is not None:
                return decoder
        return getattr(model, "model", model)

    # ------------------------------------------------------------------------------------- the context

    @contextlib.contextmanager
    def __call__(self, model: torch.nn.Module) -> Iterator[PressCache]:
        """Hook ``model`` for the duration of the context and yield a fresh :class:`PressCache`."""
        if id(model) in _ACTIVE_MODELS:
            raise ValueError("model: a press is already active on this model (presses do not nest)")
        modules = self._attention_modules(model)
        config = model.config
        raw_impl = config._attn_implementation
        original_impl = raw_impl or "eager"
        cache = PressCache()
        created: list[PressCache] = [cache]
        handles = []
        self.stats = []
        attn_mod.register()
        _REGISTRATIONS[0] += 1
        _ACTIVE_MODELS.add(id(model))
        try:
            decoder = self._decoder(model)
            hooked = [model] if decoder is model else [model, decoder]
            for top in hooked:
                handles.append(
                    top.register_forward_pre_hook(
                        self._make_model_pre_hook(top, cache, created, top is decoder),
                        with_kwargs=True,
                    )
                )
            for module in modules:
                handles.append(
                    module.register_forward_pre_hook(
                        self._make_pre_hook(original_impl), with_kwargs=True
                    )
                )
                handles.append(module.register_forward_hook(self._post_hook, with_kwargs=True))
            config._attn_implementation = attn_mod.ATTENTION_NAME
            cache.active = True
            yield cache
        finally:
            for c in created:
                c.active = False
            config._attn_implementation = raw_impl
            for h in handles:
                h.remove()
            for module in modules:
                attn_mod._STATE.pop(module, None)
            _ACTIVE_MODELS.discard(id(model))
            _REGISTRATIONS[0] -= 1
            if _REGISTRATIONS[0] == 0:
                from transformers import AttentionInterface

                AttentionInterface._global_mapping.pop(attn_mod.ATTENTION_NAME, None)

    def _make_model_pre_hook(
        self, module: torch.nn.Module, cache: PressCache, created: list, is_decoder: bool
    ):
        """The pre-hook on the causal LM and its decoder: padding checks and cache substitution."""
        names = _forward_arguments(module)

        def get(args, kwargs, name):
            if name in kwargs:
                return kwargs[name]
            if name in names and names.index(name) < len(args):
                return args[names.index(name)]
            return None

        def pre_hook(mod, args, kwargs):
            _check_mask(get(args, kwargs, "attention_mask"))
            if not is_decoder:
                return None
            key = "cache" if "cache" in names else "past_key_values"
            given = get(args, kwargs, key)
            if given is None and key != "past_key_values":
                given = kwargs.get("past_key_values")
            use_cache = get(args, kwargs, "use_cache")
            if use_cache is None:
                use_cache = getattr(mod.config, "use_cache", True)
            if isinstance(given, PressCache):
                return None
            if given is None and not use_cache:
                return None
            if given is not None and not (
                type(given) is DynamicCache and given.get_seq_length() == 0
            ):
                raise TypeError(
                    f"cache: inside a press context pass no cache, an empty DynamicCache or the "
                    f"PressCache it yields; got a {type(given).__name__} holding "
                    f"{given.get_seq_length()} tokens"
                )
            if cache.get_seq_length() == 0 and not any(
                layer.is_initialized for layer in cache.layers
            ):
                target = cache
            else:
                target = PressCache()
                target.active = True
                created.append(target)
            args = list(args)
            if key in names and names.index(key) < len(args):
                args[names.index(key)] = target
            else:
                kwargs[key] = target
            kwargs.pop("past_key_values" if key != "past_key_values" else "_unused", None)
            return tuple(args), kwargs

        return pre_hook

    def _make_pre_hook(self, impl: str):
        def pre_hook(module, args, kwargs):
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            if cache is not None and not isinstance(cache, PressCache):
                raise TypeError(
                    f"cache: inside a press context pass the PressCache it yields (or use_cache=False), "
                    f"got a foreign {type(cache).__name__}"
                )
            if cache is not None and not cache.active:
                raise ValueError(
                    "cache: this PressCache belongs to a press context that has exited"
                )
            attn_mod._STATE[module] = {"cache": cache, "impl": impl, "press": self}
            return None

        return pre_hook

    def _post_hook(self, module, args, kwargs, output):
        state = attn_mod._STATE.get(module, {})
        cache = state.get("cache")
        if cache is None:
            return None
        layer = cache.layers[module.layer_idx]
        if not layer.prefill_pending:
            return None
        layer.prefill_pending = False
        queries, scaling = state.pop("window_queries", None), state.pop("scaling", None)
        if queries is None:
            raise RuntimeError(
                f"layer {module.layer_idx}: the prefill queries were not captured by the attention"
            )
        self._compress(module.layer_idx, layer, queries, scaling)
        return None

    # ------------------------------------------------------------------------------------- compression

    def keep_mask(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        scaling: float | None = None,
        layer_idx: int = 0,
    ) -> torch.Tensor:
        """What this press keeps of one layer, at the tensor level (no model).

        Args:
            queries: ``[B, H_q, w, d]`` post-RoPE queries of the last ``window`` prompt tokens.
            keys, values: ``[B, H_kv, L, d]`` post-RoPE keys and values of the prompt.
            scaling: attention logit scale (default ``1/sqrt(d)``).
            layer_idx: passed to the scorer (seeds the random scorer).

        Returns:
            ``[B, H, L]`` bool keep mask, ``H = H_kv`` (or ``H_q`` for a ``"per_qhead"`` scorer).
        """
        length = keys.shape[2]
        budget = resolve_budget(self.budget, length, self.sink_tokens, self.window)
        groups = queries.shape[1] // keys.shape[1]
        heads = keys.shape[1] * (groups if self.scorer.gqa_reduce == "per_qhead" else 1)
        if budget == length:
            return torch.ones(keys.shape[0], heads, length, dtype=torch.bool, device=keys.device)
        ctx = ScoringContext(
            queries=queries,
            keys=keys,
            values=values,
            sink_tokens=self.sink_tokens,
            window=self.window,
            pool_kernel=self.pool_kernel,
            scaling=scaling,
            layer_idx=layer_idx,
        )
        scores = self.scorer.score(ctx)
        if scores.shape != (keys.shape[0], heads, length):
            raise RuntimeError(
                f"{type(self.scorer).__name__}.score returned {tuple(scores.shape)}, expected {(keys.shape[0], heads, length)}"
            )
        return select_keep(
            scores,
            budget,
            sink_tokens=self.sink_tokens,
            window=self.window,
            chunk_size=self.chunk_size,
            head_budget=self.head_budget,
        )

    def _compress(self, layer_idx: int, layer, queries: torch.Tensor, scaling: float) -> None:
        length = layer.logical_length
        keep = self.keep_mask(queries, layer.keys, layer.values, scaling, layer_idx)
        if not bool(keep.all()):
            layer.compress(keep)
        self.stats.append(
            {
                "layer": layer_idx,
                "length": length,
                "budget": int(keep[0].sum()) // keep.shape[1],
                "kept": layer.kept_counts(),
            }
        )
