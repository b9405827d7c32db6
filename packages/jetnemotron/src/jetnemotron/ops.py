"""Public ops of jetnemotron: argument checks, autograd functions and backend dispatch.

* :func:`gated_delta_rule` — backends ``"reference"`` (sequential), ``"torch"`` (chunked, the CPU
  default) and ``"triton"`` (chunked kernels; the backward recomputes through the torch path).
* :func:`dynamic_conv` and :func:`dynamic_conv_step` — the input-generated causal convolution of
  JetBlock; backends ``"reference"`` (unfold), ``"torch"`` (tap loop) and ``"triton"``.

``backend=None`` picks Triton for CUDA tensors (when installed) and torch otherwise. Triton is
imported lazily (``backend="triton"`` on CPU tensors needs ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import math

import torch

from neurips25_core.device import triton_available, triton_interpret, use_triton_for

__all__ = ["dynamic_conv", "dynamic_conv_step", "gated_delta_rule"]

_BACKENDS = (None, "reference", "torch", "triton")
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_ACTIVATIONS = ("silu", None)


def _check_tensor(name: str, t, ndim: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in _FLOATS:
        raise TypeError(
            f"{name}: expected a floating dtype (float16, bfloat16, float32, float64), got {t.dtype}"
        )
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(t.shape)}")


def _check_backend(backend, ref: torch.Tensor) -> str:
    if backend not in _BACKENDS:
        raise ValueError(f"backend: expected one of {_BACKENDS}, got {backend!r}")
    if backend == "triton":
        if not triton_available():
            raise ValueError("backend: 'triton' requested but triton is not installed")
        if not ref.is_cuda and not triton_interpret():
            raise ValueError(
                "backend: 'triton' needs CUDA tensors (or TRITON_INTERPRET=1 for CPU tensors), "
                f"got tensors on {ref.device}"
            )
    if backend is None:
        backend = "triton" if use_triton_for(ref) else "torch"
    return backend


def _check_same_device(ref: torch.Tensor, **tensors) -> None:
    for name, t in tensors.items():
        if t is not None and t.device != ref.device:
            raise ValueError(
                f"{name}: expected the device of the input ({ref.device}), got {t.device}"
            )


def _state_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm: bool = True,
    chunk_size: int = 64,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The gated delta rule (Gated DeltaNet / JetBlock token mixer) over a sequence.

    ``S_t = e^{g_t}(I − β_t k̃_t k̃_tᵀ) S_{t−1} + β_t k̃_t v_tᵀ`` and ``o_t = s·S_tᵀ q̃_t``, with
    ``q̃, k̃`` unit-normalised (``x·(Σx² + 1e-6)^−½``) when ``use_qk_l2norm``.

    Args:
        q, k: [B, T, H, d_k]; v: [B, T, H, d_v] (same dtype as q).
        g: [B, T, H], log decay, every entry <= 0 (any float dtype; used in float32/float64).
        beta: [B, T, H], the write strength (usually in [0, 1]).
        scale: query scale, default ``d_k^−½``.
        initial_state: [B, H, d_k, d_v] or None (zeros).
        output_final_state: also return the last state (else the second output is None).
        use_qk_l2norm: normalise q and k inside the op.
        chunk_size: chunk length C of the chunked backends (any T is accepted); the Triton
            backend needs a power of two >= 16.
        backend: None (Triton on CUDA, torch on CPU), ``"reference"``, ``"torch"``, ``"triton"``.

    Returns:
        ``(o [B, T, H, d_v] in the dtype of q, S [B, H, d_k, d_v] float32/float64 or None)``.

    Raises:
        TypeError, ValueError: on bad arguments, before anything is computed.

    Example:
        >>> import torch
        >>> from jetnemotron.ops import gated_delta_rule
        >>> q, k = torch.randn(2, 1, 10, 3, 8).unbind(0)
        >>> v = torch.randn(1, 10, 3, 12)
        >>> g = -torch.rand(1, 10, 3)
        >>> beta = torch.rand(1, 10, 3)
        >>> o, S = gated_delta_rule(q, k, v, g, beta, output_final_state=True, chunk_size=4)
        >>> o.shape, S.shape
        (torch.Size([1, 10, 3, 12]), torch.Size([1, 3, 8, 12]))
    """
    _check_tensor("q", q, 4)
    B, T, H, dk = q.shape
    _check_tensor("k", k, 4)
    if k.shape != q.shape:
        raise ValueError(
            f"k: expected the shape of q {tuple(q.shape)} [B, T, H, d_k], got {tuple(k.shape)}"
        )
    _check_tensor("v", v, 4)
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"v: expected shape [B, T, H, d_v] = [{B}, {T}, {H}, d_v], got {tuple(v.shape)}"
        )
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name}: expected the dtype of q ({q.dtype}), got {t.dtype}")
    for name, t in (("g", g), ("beta", beta)):
        _check_tensor(name, t, 3)
        if t.shape != q.shape[:3]:
            raise ValueError(
                f"{name}: expected shape [B, T, H] = [{B}, {T}, {H}], got {tuple(t.shape)}"
            )
    _check_same_device(q, k=k, v=v, g=g, beta=beta, initial_state=initial_state)
    if T < 1 or dk < 1 or v.shape[-1] < 1:
        raise ValueError(
            f"q/v: expected non-empty sequence and head dims, got q {tuple(q.shape)}, v {tuple(v.shape)}"
        )
    if bool((g.detach() > 0).any()):
        raise ValueError(
            f"g: expected log decays <= 0 (g = −exp(A_log)·softplus(·)), got max {g.max().item():.3g}"
        )
    if scale is not None and (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or not math.isfinite(scale)
        or scale <= 0
    ):
        raise ValueError(f"scale: expected None or a finite float > 0, got {scale!r}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected an int >= 1, got {chunk_size!r}")
    for name, flag in (
        ("output_final_state", output_final_state),
        ("use_qk_l2norm", use_qk_l2norm),
    ):
        if not isinstance(flag, bool):
            raise TypeError(f"{name}: expected a bool, got {type(flag).__name__}")
    if initial_state is not None:
        _check_tensor("initial_state", initial_state, 4)
        shape = (B, H, dk, v.shape[-1])
        if tuple(initial_state.shape) != shape:
            raise ValueError(
                f"initial_state: expected shape [B, H, d_k, d_v] = {list(shape)}, got {list(initial_state.shape)}"
            )
    backend = _check_backend(backend, q)
    if backend == "triton" and (chunk_size < 16 or chunk_size & (chunk_size - 1)):
        raise ValueError(
            f"chunk_size: the Triton backend needs a power of two >= 16, got {chunk_size}"
        )
    scale = 1.0 / math.sqrt(dk) if scale is None else float(scale)
    if backend == "reference":
        from jetnemotron.reference import gated_delta_rule_recurrent

        o, S = gated_delta_rule_recurrent(
            q,
            k,
            v,
            g.to(q.dtype),
            beta.to(q.dtype),
            scale=scale,
            initial_state=initial_state,
            use_qk_l2norm=use_qk_l2norm,
        )
        S = S.to(_state_dtype(q.dtype))
    elif backend == "torch":
        from jetnemotron.chunked import gated_delta_rule_chunked

        o, S = gated_delta_rule_chunked(
            q,
            k,
            v,
            g,
            beta,
            scale=scale,
            initial_state=initial_state,
            use_qk_l2norm=use_qk_l2norm,
            chunk_size=chunk_size,
        )
    else:
        from jetnemotron.kernels import gated_delta_rule_triton

        o, S = gated_delta_rule_triton(
            q,
            k,
            v,
            g,
            beta,
            scale=scale,
            initial_state=initial_state,
            use_qk_l2norm=use_qk_l2norm,
            chunk_size=chunk_size,
        )
    return o, (S if output_final_state else None)


def _check_conv(x, kernels, cache, activation):
    _check_tensor("x", x, 3)
    _check_tensor("kernels", kernels, 4)
    B, T, D = x.shape
    if kernels.shape[:3] != x.shape:
        raise ValueError(
            f"kernels: expected shape [B, T, D, W] = [{B}, {T}, {D}, W], got {list(kernels.shape)}"
        )
    if kernels.dtype != x.dtype:
        raise TypeError(f"kernels: expected the dtype of x ({x.dtype}), got {kernels.dtype}")
    W = kernels.shape[-1]
    if T < 1 or D < 1 or W < 1:
        raise ValueError(
            f"x/kernels: expected non-empty T, D and W, got x {list(x.shape)}, kernels {list(kernels.shape)}"
        )
    if cache is not None:
        _check_tensor("cache", cache, 3)
        if tuple(cache.shape) != (B, D, W):
            raise ValueError(
                f"cache: expected shape [B, D, W] = [{B}, {D}, {W}] (W = the kernel width), got {list(cache.shape)}"
            )
    _check_same_device(x, kernels=kernels, cache=cache)
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation: expected one of {_ACTIVATIONS}, got {activation!r}")


def dynamic_conv(
    x: torch.Tensor,
    kernels: torch.Tensor,
    *,
    cache: torch.Tensor | None = None,
    activation: str | None = "silu",
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal depthwise convolution whose kernel is generated per token: JetBlock's value conv.

    ``y_t[c] = act(Σ_{w<W} K_t[c, w]·x_{t−W+1+w}[c])``; tap ``W − 1`` multiplies the current token,
    and the inputs before the start come from ``cache`` (zeros when None). Any T continues a cache
    correctly (chunked prefill, multi-token decode).

    Args:
        x: [B, T, D] raw inputs.
        kernels: [B, T, D, W], same dtype as x.
        cache: [B, D, W] the last W inputs before ``x`` (oldest first), or None.
        activation: ``"silu"`` or None.
        backend: None, ``"reference"``, ``"torch"`` or ``"triton"``.

    Returns:
        ``(y [B, T, D], cache [B, D, W])``: the new cache holds the last W inputs (a new tensor;
        the given cache is not modified).

    Example:
        >>> import torch
        >>> from jetnemotron.ops import dynamic_conv
        >>> x, kernels = torch.randn(2, 7, 5), torch.randn(2, 7, 5, 4)
        >>> y, cache = dynamic_conv(x, kernels)
        >>> y.shape, cache.shape
        (torch.Size([2, 7, 5]), torch.Size([2, 5, 4]))
    """
    _check_conv(x, kernels, cache, activation)
    backend = _check_backend(backend, x)
    B, _T, D = x.shape
    W = kernels.shape[-1]
    past = torch.zeros(B, D, W, dtype=x.dtype, device=x.device) if cache is None else cache
    if backend == "reference":
        from jetnemotron.reference import dynamic_conv_unfold

        return dynamic_conv_unfold(x, kernels, cache=past, activation=activation)
    if backend == "torch":
        from jetnemotron.chunked import dynamic_conv_taps

        return dynamic_conv_taps(x, kernels, past, activation)
    from jetnemotron.kernels import dynamic_conv_triton

    return dynamic_conv_triton(x, kernels, past, activation)


def dynamic_conv_step(
    x: torch.Tensor,
    kernels: torch.Tensor,
    cache: torch.Tensor,
    *,
    activation: str | None = "silu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step of :func:`dynamic_conv`: x [B, D], kernels [B, D, W], cache [B, D, W].

    Returns ``(y [B, D], cache [B, D, W])`` (a new cache: shifted left, x appended).

    Example:
        >>> import torch
        >>> from jetnemotron.ops import dynamic_conv_step
        >>> y, cache = dynamic_conv_step(
        ...     torch.randn(2, 5), torch.randn(2, 5, 4), torch.zeros(2, 5, 4)
        ... )
        >>> y.shape, cache.shape
        (torch.Size([2, 5]), torch.Size([2, 5, 4]))
    """
    _check_tensor("x", x, 2)
    _check_tensor("kernels", kernels, 3)
    if kernels.shape[:2] != x.shape:
        raise ValueError(
            f"kernels: expected shape [B, D, W] = [{x.shape[0]}, {x.shape[1]}, W], got {list(kernels.shape)}"
        )
    if kernels.dtype != x.dtype:
        raise TypeError(f"kernels: expected the dtype of x ({x.dtype}), got {kernels.dtype}")
    if not isinstance(cache, torch.Tensor):
        raise TypeError(f"cache: expected a torch.Tensor, got {type(cache).__name__}")
    _check_tensor("cache", cache, 3)
    if tuple(cache.shape) != tuple(kernels.shape):
        raise ValueError(
            f"cache: expected shape [B, D, W] = {list(kernels.shape)} (W = the kernel width), got {list(cache.shape)}"
        )
    _check_same_device(x, kernels=kernels, cache=cache)
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation: expected one of {_ACTIVATIONS}, got {activation!r}")
    new = torch.cat([cache[..., 1:].to(x.dtype), x[..., None]], dim=-1)
    z = (new * kernels).sum(-1)
    y = torch.nn.functional.silu(z) if activation == "silu" else z
    return y, new
