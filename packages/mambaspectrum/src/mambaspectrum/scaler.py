"""What users touch: per-layer scaling of a transformers Mamba/Mamba2 model, undone exactly.

:class:`Scaler` edits the weights in place (``A_log``, and for ``delta`` on Mamba-1 the ``B`` rows
of ``x_proj``) from float32 master copies, so every path of the model - prefill, the cached decode
step, ``generate`` - sees the scale. The official code recomputes ``A`` inside the mixer forward
and its ``step()`` forgets the scale; ``prefill_only=True`` reproduces that behaviour on purpose.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from torch import nn

from .reference import MODES, scaled_a_log
from .scan import selective_scan

GRANULARITIES = ("layer", "element")


def _mixers(model) -> tuple[str, list[nn.Module]]:
    from transformers import Mamba2ForCausalLM, Mamba2Model, MambaForCausalLM, MambaModel

    if isinstance(model, (MambaForCausalLM, MambaModel)):
        kind = "mamba"
    elif isinstance(model, (Mamba2ForCausalLM, Mamba2Model)):
        kind = "mamba2"
    else:
        raise TypeError(
            "model: expected a transformers MambaForCausalLM/MambaModel or Mamba2ForCausalLM/Mamba2Model, "
            f"got {type(model).__name__}"
        )
    backbone = model.backbone if hasattr(model, "backbone") else model
    return kind, [layer.mixer for layer in backbone.layers]


def spectrum(model) -> list[torch.Tensor]:
    """The continuous eigenvalues ``a = exp(A_log)`` of every layer (``A = -a``).

    Returns (d_inner, N) tensors for Mamba-1 and (heads,) tensors for Mamba-2.
    """
    _, mixers = _mixers(model)
    return [torch.exp(m.A_log.detach().float()) for m in mixers]


class Scaler:
    """Scale the SSM of every layer of a Mamba/Mamba2 model; ``reset()`` restores it bit for bit.

    Args:
        model: ``MambaForCausalLM`` or ``Mamba2ForCausalLM`` (or their backbones).
        mode: ``"spectrum"`` (``A_log <- s * A_log``, the paper), ``"a_linear"``
            (``A_log <- A_log + log s``) or ``"delta"`` (MambaExtend: ``delta <- s * delta``; on
            Mamba-1 the exact reparametrisation ``A_log += log s`` and the B rows of ``x_proj``
            times ``s``; on Mamba-2, whose B passes through the convolution, a patched mixer
            forward multiplies ``dt`` by ``s`` after ``softplus`` and the ``time_step_limit``
            clamp, on the full-sequence, prefill and decode paths alike).
        granularity: ``"layer"`` (scales of shape (layers,)) or ``"element"`` ((layers, d_inner, N)
            on Mamba-1, (layers, heads) on Mamba-2; ``delta`` on Mamba-1 is per layer only).
        prefill_only: reproduce the official behaviour - the scale applies to full-sequence
            forwards, the cached one-token decode step uses the unscaled ``A``.

    Example:
        >>> from transformers import MambaConfig, MambaForCausalLM
        >>> model = MambaForCausalLM(
        ...     MambaConfig(vocab_size=16, hidden_size=8, num_hidden_layers=2, state_size=4)
        ... )
        >>> with Scaler(model, mode="spectrum") as scaler:
        ...     _ = scaler.set([0.5, 0.9])
        ...     round(float(spectrum(model)[0][0, 3]), 4)  # a = 4 -> 4 ** 0.5
        2.0
        >>> round(float(spectrum(model)[0][0, 3]), 4)  # restored on exit
        4.0
    """

    def __init__(
        self, model, mode: str = "spectrum", granularity: str = "layer", prefill_only: bool = False
    ):
        kind, mixers = _mixers(model)
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity: expected one of {GRANULARITIES}, got {granularity!r}")
        if mode == "delta" and kind == "mamba" and granularity != "layer":
            raise ValueError(
                "granularity: 'delta' on Mamba-1 scales one delta per layer; expected 'layer', got 'element'"
            )
        if not isinstance(prefill_only, bool):
            raise TypeError(f"prefill_only: expected a bool, got {type(prefill_only).__name__}")
        self.model, self.kind, self.mixers = model, kind, mixers
        self.mode, self.granularity, self.prefill_only = mode, granularity, prefill_only

        # master copies in float32, or float64 for a float64 model (so its reset is exact too)
        def master(t):
            return t.detach().to(torch.promote_types(t.dtype, torch.float32)).clone()

        self._a_log = [master(m.A_log) for m in mixers]
        self._x_proj = (
            [master(m.x_proj.weight) for m in mixers]
            if mode == "delta" and kind == "mamba"
            else None
        )
        # Mamba-2 delta is not a weight edit: the scale lives on the mixer, read by a patched forward
        self._dt_patch = mode == "delta" and kind == "mamba2"
        self.scales = torch.ones(self.shape, dtype=torch.float32)
        self._hooks: list = []

    @property
    def num_layers(self) -> int:
        return len(self.mixers)

    @property
    def shape(self) -> tuple[int, ...]:
        if self.granularity == "layer":
            return (self.num_layers,)
        return (self.num_layers, *self._a_log[0].shape)

    def _validate(self, scales) -> torch.Tensor:
        s = torch.as_tensor(scales, dtype=torch.float64).detach().cpu()
        if tuple(s.shape) != self.shape:
            raise ValueError(f"scales: expected shape {self.shape}, got {tuple(s.shape)}")
        if not torch.isfinite(s).all():
            raise ValueError("scales: expected finite values, got non-finite entries")
        if (s <= 0).any():
            raise ValueError(f"scales: expected every scale > 0, got min {float(s.min())}")
        return s

    @torch.no_grad()
    def set(self, scales) -> Scaler:
        """Apply ``scales`` (recomputed from the master copies, so calls never accumulate)."""
        s = self._validate(scales)
        if self._dt_patch:
            unit = bool((s == 1).all())  # s = 1: HF's own forward, bit for bit
            for i, m in enumerate(self.mixers):
                if unit:
                    _unpatch_dt(m)
                else:
                    _patch_dt(m, s[i].to(self._a_log[i].dtype), self.prefill_only)
            self.scales = s.float()
            return self
        for i, m in enumerate(self.mixers):
            s_i = s[i].to(self._a_log[i].dtype)
            m.A_log.copy_(scaled_a_log(self._a_log[i], s_i, self.mode).to(m.A_log.dtype))
            if self._x_proj is not None:
                w = self._x_proj[i].clone()
                r, n = m.time_step_rank, m.ssm_state_size
                w[r : r + n] *= s_i
                m.x_proj.weight.copy_(w.to(m.x_proj.weight.dtype))
        self.scales = s.float()
        self._install_prefill_only()
        return self

    def scaled_parameters(self, scales: torch.Tensor) -> dict[str, torch.Tensor]:
        """The scaled weights as a differentiable function of ``scales`` (shape :attr:`shape`).

        Returns ``{parameter name in the model: tensor}`` computed from the fp32 master copies by
        the same rule as :meth:`set`, for ``torch.func.functional_call`` (how
        :func:`~mambaspectrum.calibrate_grad` backpropagates into the scales without touching the
        model). No value checks: ``scales`` may require grad.
        """
        if not isinstance(scales, torch.Tensor) or tuple(scales.shape) != self.shape:
            raise ValueError(
                f"scales: expected a tensor of shape {self.shape}, got {tuple(getattr(scales, 'shape', ()))}"
            )
        if self._dt_patch:
            raise ValueError(
                "mode: 'delta' on Mamba-2 scales dt inside a patched forward, not a weight; "
                "scaled_parameters (and calibrate_grad) support it on Mamba-1 only"
            )
        names = {id(p): n for n, p in self.model.named_parameters()}
        out = {}
        for i, m in enumerate(self.mixers):
            s_i = scales[i].to(self._a_log[i].dtype)
            out[names[id(m.A_log)]] = scaled_a_log(self._a_log[i], s_i, self.mode).to(m.A_log.dtype)
            if self.mode == "delta":
                w = self._x_proj[i]
                r, n = m.time_step_rank, m.ssm_state_size
                w = torch.cat([w[:r], w[r : r + n] * s_i, w[r + n :]])
                out[names[id(m.x_proj.weight)]] = w.to(m.x_proj.weight.dtype)
        return out

    @torch.no_grad()
    def reset(self) -> Scaler:
        """Restore the original weights (and forwards) exactly."""
        for i, m in enumerate(self.mixers):
            if self._dt_patch:
                _unpatch_dt(m)
                continue
            m.A_log.copy_(self._a_log[i].to(m.A_log.dtype))
            if self._x_proj is not None:
                m.x_proj.weight.copy_(self._x_proj[i].to(m.x_proj.weight.dtype))
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self.scales = torch.ones(self.shape, dtype=torch.float32)
        return self

    def _install_prefill_only(self):
        if not self.prefill_only or self._hooks:
            return
        # The official step() rebuilds A from the unscaled A_log: swap the originals in around
        # every one-token forward.
        for i, m in enumerate(self.mixers):

            def pre(module, args, kwargs, i=i):
                hidden = args[0] if args else kwargs["hidden_states"]
                cache = kwargs.get("cache", kwargs.get("cache_params"))
                if hidden.shape[1] == 1 and cache is not None:
                    module._mambaspectrum_saved = module.A_log.detach().clone()
                    with torch.no_grad():
                        module.A_log.copy_(self._a_log[i].to(module.A_log.dtype))

            def post(module, args, kwargs, output):
                saved = getattr(module, "_mambaspectrum_saved", None)
                if saved is not None:
                    with torch.no_grad():
                        module.A_log.copy_(saved)
                    module._mambaspectrum_saved = None

            self._hooks.append(m.register_forward_pre_hook(pre, with_kwargs=True))
            self._hooks.append(m.register_forward_hook(post, with_kwargs=True))

    def __enter__(self) -> Scaler:
        return self

    def __exit__(self, *exc) -> None:
        self.reset()


def _patch_dt(mixer, scale: torch.Tensor, prefill_only: bool) -> None:
    if not hasattr(mixer, "_mambaspectrum_dt_original_forward"):
        mixer._mambaspectrum_dt_original_forward = mixer.forward
        mixer.forward = types.MethodType(_mamba2_dt_scaled_forward, mixer)
    mixer._mambaspectrum_dt_scale = scale.clone()
    mixer._mambaspectrum_prefill_only = prefill_only


def _unpatch_dt(mixer) -> None:
    if hasattr(mixer, "_mambaspectrum_dt_original_forward"):
        mixer.forward = mixer._mambaspectrum_dt_original_forward
        del mixer._mambaspectrum_dt_original_forward
        del mixer._mambaspectrum_dt_scale, mixer._mambaspectrum_prefill_only


def _mamba2_dt_scaled_forward(
    self, hidden_states, cache=None, attention_mask=None, cache_params=None, **kwargs
):
    """A transformers ``Mamba2Mixer`` forward (its torch path) with ``dt`` scaled: MambaExtend on
    Mamba-2, ``dt <- s * clamp(softplus(dt + dt_bias), *time_step_limit)``.

    The same steps and the same transformers helpers as ``Mamba2Mixer.forward`` (convolution,
    cache updates, ``mamba2_chunk_scan``, ``mamba2_selective_state_update``, gated norm); only
    ``dt`` is computed here, scaled, and handed to the scans with softplus, bias and clamp off.
    The decode step clamps too (transformers' step skips ``time_step_limit``; equal under the
    default ``(0, inf)``). ``prefill_only`` leaves one-token cached steps unscaled, as the
    official ``step()`` does.
    """
    from transformers.models.mamba2 import modeling_mamba2 as hf

    cache = cache if cache is not None else cache_params
    batch, length, _ = hidden_states.shape
    dtype = hidden_states.dtype
    conv_state = recurrent_state = None
    if cache is not None:
        conv_state = cache.get_conv_state(self.layer_idx, state_idx=0)
        recurrent_state = cache.get_recurrent_state(self.layer_idx, state_idx=0)
    projected = self.in_proj(hf.apply_mask_to_padding_states(hidden_states, attention_mask))
    gate, xbc, dt = projected.split([self.intermediate_size, self.conv_dim, self.num_heads], dim=-1)
    xbc = xbc.transpose(1, 2)
    weight = self.conv1d.weight.squeeze(1)
    if conv_state is not None and length == 1 and not cache.is_recording_past(self.layer_idx):
        xbc = hf.causal_conv1d_update(
            xbc, conv_state, weight, self.conv1d.bias, activation=self.activation
        )
    else:
        if cache is not None:
            xbc = cache.update_conv_state(
                xbc, self.layer_idx, conv_kernel_size=self.conv_kernel_size
            )
        xbc = hf.causal_conv1d_fn(xbc, weight, self.conv1d.bias, activation=self.activation)
        if cache is not None:
            xbc = xbc[:, :, -length:]
    xbc = hf.apply_mask_to_padding_states(xbc.transpose(1, 2), attention_mask)
    gn = self.n_groups * self.ssm_state_size
    x, B, C = torch.split(xbc, [self.intermediate_size, gn, gn], dim=-1)

    scale = self._mambaspectrum_dt_scale
    if self._mambaspectrum_prefill_only and cache is not None and length == 1:
        scale = torch.ones_like(scale)
    dt = F.softplus(dt + self.dt_bias.to(dt.dtype))
    dt = torch.clamp(dt, self.time_step_limit[0], self.time_step_limit[1]) * scale.to(dt.dtype)
    A = -torch.exp(self.A_log.float())

    if recurrent_state is not None and length == 1:
        out = hf.mamba2_selective_state_update(
            recurrent_state,
            x.view(batch, self.num_heads, self.head_dim),
            dt.transpose(1, 2).expand(-1, -1, self.head_dim),
            A[:, None, None].expand(-1, self.head_dim, self.ssm_state_size),
            B.view(batch, self.n_groups, self.ssm_state_size),
            C.view(batch, self.n_groups, self.ssm_state_size),
            self.D[:, None].expand(-1, self.head_dim),
            z=None,
            dt_bias=None,
            dt_softplus=False,
        ).view(batch, 1, -1)
    else:
        result = hf.mamba2_chunk_scan(
            x.view(batch, length, self.num_heads, self.head_dim),
            dt,
            A,
            B.view(batch, length, self.n_groups, self.ssm_state_size),
            C.view(batch, length, self.n_groups, self.ssm_state_size),
            chunk_size=self.chunk_size,
            D=self.D,
            z=None,
            return_final_states=cache is not None,
            dt_bias=None,
            dt_softplus=False,
            initial_states=recurrent_state,
        )
        if cache is not None:
            result, final_state = result
            cache.update_recurrent_state(final_state, layer_idx=self.layer_idx)
        out = result.reshape(batch, length, -1)
    return self.out_proj(self.norm(out, gate).to(dtype))


def _fast_mixer_forward(self, hidden_states, cache=None, attention_mask=None, **kwargs):
    """Mamba-1 mixer forward through :func:`selective_scan` (full sequences without a cache)."""
    if (
        cache is not None
        or kwargs.get("cache_params") is not None
        or (attention_mask is not None and not bool(attention_mask.all()))
    ):
        return self._mambaspectrum_original_forward(
            hidden_states, cache=cache, attention_mask=attention_mask, **kwargs
        )
    dtype = hidden_states.dtype
    length = hidden_states.shape[1]
    projected = self.in_proj(hidden_states).transpose(1, 2)
    x, gate = projected.chunk(2, dim=1)
    x = self.act(self.conv1d(x)[..., :length])
    time_step, B, C = torch.split(
        self.x_proj(x.transpose(1, 2)),
        [self.time_step_rank, self.ssm_state_size, self.ssm_state_size],
        dim=-1,
    )
    dt = self.dt_proj.weight @ time_step.transpose(1, 2)
    # at least float32 (HF's choice), float64 for a float64 model
    wide = torch.promote_types(self.A_log.dtype, torch.float32)
    if self.dt_proj.bias is not None:
        dt = dt + self.dt_proj.bias.to(wide)[:, None]
    delta = F.softplus(dt)
    A = -torch.exp(self.A_log.to(wide))
    y = selective_scan(
        x,
        delta,
        A,
        B.transpose(1, 2),
        C.transpose(1, 2),
        D=self.D.to(wide),
        z=gate,
        backend=self._mambaspectrum_backend,
        compute_dtype=getattr(self, "_mambaspectrum_compute_dtype", torch.float64),
    )
    return self.out_proj(y.transpose(1, 2).to(dtype))


def patch_fast_forward(model, backend: str = "chunked", compute_dtype=torch.float64):
    """Route the full-sequence forward of every Mamba-1 mixer through this package's scan.

    HF's CPU path materialises ``(batch, d_inner, L, N)`` tensors and loops over tokens in
    Python; the patched forward uses :func:`selective_scan` (``backend``) instead. Forwards with
    a cache or a padding mask keep HF's own code; in eval mode transformers builds a cache for a
    plain ``model(ids)`` call, so call ``model(ids, use_cache=False)`` for the fast path (this
    package's evaluation and calibration do). ``compute_dtype`` is the chunked scan's
    (float64 by default; float32 trains ~2x faster). Returns the model; ``unpatch_fast_forward``
    undoes it.
    """
    kind, mixers = _mixers(model)
    if kind != "mamba":
        raise TypeError(
            f"model: patch_fast_forward supports Mamba-1 only, got {type(model).__name__}"
        )
    if backend not in ("auto", "chunked", "reference", "triton"):
        raise ValueError(
            f"backend: expected 'auto', 'chunked', 'reference' or 'triton', got {backend!r}"
        )
    if compute_dtype not in (torch.float32, torch.float64):
        raise ValueError(
            f"compute_dtype: expected torch.float32 or torch.float64, got {compute_dtype!r}"
        )
    for m in mixers:
        if not hasattr(m, "_mambaspectrum_original_forward"):
            m._mambaspectrum_original_forward = m.forward
        m._mambaspectrum_backend = backend
        m._mambaspectrum_compute_dtype = compute_dtype
        m.forward = types.MethodType(_fast_mixer_forward, m)
    return model


def unpatch_fast_forward(model):
    """Undo :func:`patch_fast_forward`."""
    _, mixers = _mixers(model)
    for m in mixers:
        if hasattr(m, "_mambaspectrum_original_forward"):
            m.forward = m._mambaspectrum_original_forward
            del m._mambaspectrum_original_forward
    return model


@torch.no_grad()
def state_norms(model, input_ids: torch.Tensor, lengths) -> dict[str, list[list[float]]]:
    """Per-layer min and max over channels of the SSM state norm ``||h_T||`` at each length ``T``.

    Mamba-1 only (the states are recomputed from each mixer's inputs with the chunked scan).
    Returns ``{"lengths": [...], "min": [[layer0 at each length], ...], "max": [...]}``.
    """
    kind, mixers = _mixers(model)
    if kind != "mamba":
        raise TypeError(f"model: state_norms supports Mamba-1 only, got {type(model).__name__}")
    if (
        not isinstance(input_ids, torch.Tensor)
        or input_ids.dim() != 2
        or input_ids.is_floating_point()
    ):
        raise ValueError("input_ids: expected a 2-D integer tensor")
    lengths = [int(t) for t in lengths]
    if not lengths or min(lengths) < 1 or max(lengths) > input_ids.shape[1]:
        raise ValueError(f"lengths: expected values in [1, {input_ids.shape[1]}], got {lengths}")
    captured = {}

    def hook(module, args, kwargs, i):
        captured[i] = args[0] if args else kwargs["hidden_states"]

    handles = [
        m.register_forward_pre_hook(lambda mod, a, k, i=i: hook(mod, a, k, i), with_kwargs=True)
        for i, m in enumerate(mixers)
    ]
    try:
        model(input_ids[:, : max(lengths)], use_cache=False)
    finally:
        for h in handles:
            h.remove()
    out = {"lengths": lengths, "min": [], "max": []}
    for i, m in enumerate(mixers):
        hs = captured[i]
        proj = m.in_proj(hs).transpose(1, 2)
        x, _ = proj.chunk(2, dim=1)
        x = m.act(m.conv1d(x)[..., : hs.shape[1]])
        ts, B, C = torch.split(
            m.x_proj(x.transpose(1, 2)), [m.time_step_rank, m.ssm_state_size, m.ssm_state_size], -1
        )
        delta = F.softplus(m.dt_proj(ts)).transpose(1, 2)
        A = -torch.exp(m.A_log.float())
        mins, maxs = [], []
        h, prev = None, 0
        for t in sorted(lengths):
            _, h = selective_scan(
                x[..., prev:t].float(),
                delta[..., prev:t].float(),
                A,
                B.transpose(1, 2)[..., prev:t].float(),
                C.transpose(1, 2)[..., prev:t].float(),
                h0=h,
                return_last_state=True,
            )
            prev = t
            norms = h.norm(dim=-1)  # (batch, d_inner)
            mins.append(float(norms.min()))
            maxs.append(float(norms.max()))
        order = sorted(range(len(lengths)), key=lambda k: lengths[k])
        inv = {o: k for k, o in enumerate(order)}
        out["min"].append([mins[inv[k]] for k in range(len(lengths))])
        out["max"].append([maxs[inv[k]] for k in range(len(lengths))])
    return out
