"""Public ops of lope: argument checks, autograd functions and backend dispatch.

``expert_mix`` computes the HydraLoRA/LoPE mixture ``scaling · Σ_n g_n · B_n h`` as ONE GEMM over
``K = N·r``, using ``Σ_n g_n B_n h = (g ⊗ h).reshape(T, N·r) @ B.permute(0, 2, 1).reshape(N·r, out)``.
Its backward uses the same identity. ``backend="triton"`` runs the forward as one Triton kernel
(``lope.kernels.mix``: g ⊗ h formed in registers, K padded to 16 by masked loads, fp32
accumulation) with the same torch backward; ``"auto"`` (the default) picks Triton on CUDA tensors
and the torch path on CPU tensors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from neurips25_core.device import kernel_buffer, triton_available, triton_interpret, use_triton_for

from .reference import adapter_reference, compensate_reference, expert_mix_reference

__all__ = ["BACKENDS", "MODES", "ROUTER_INPUTS", "adapter", "compensate", "expert_mix", "route"]

BACKENDS = ("auto", "torch", "triton", "reference")
#: compensate, route and the adapter's other maths have no kernel: "auto"/"triton" run them in torch.
TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MODES = ("stage1", "stage2", "inference", "all")
ROUTER_INPUTS = ("x", "lowrank")


def _float_tensor(name: str, x, ndim: int) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got {x.dtype}")
    if x.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(x.shape)}")


def _same(name: str, x: torch.Tensor, like: torch.Tensor, like_name: str) -> None:
    if x.device != like.device:
        raise ValueError(f"{name}: expected device {like.device} (of {like_name}), got {x.device}")
    if x.dtype != like.dtype:
        raise TypeError(f"{name}: expected dtype {like.dtype} (of {like_name}), got {x.dtype}")


def _check_backend(backend, allowed: tuple[str, ...] = BACKENDS) -> None:
    if not isinstance(backend, str) or backend not in allowed:
        raise ValueError(f"backend: expected one of {allowed}, got {backend!r}")


def _resolve_mix_backend(backend: str, h: torch.Tensor) -> str:
    """``"auto"`` -> ``"triton"`` on CUDA tensors (Triton installed), else ``"torch"``; a forced
    ``"triton"`` is checked to be runnable here."""
    if backend == "auto":
        return "triton" if use_triton_for(h) and h.dtype in TRITON_DTYPES else "torch"
    if backend == "triton":
        if not triton_available():
            raise ValueError("backend: 'triton' needs the triton package, which is not installed")
        if not (h.is_cuda or triton_interpret()):
            raise ValueError(
                f"backend: 'triton' needs CUDA tensors or TRITON_INTERPRET=1 (the CPU "
                f"interpreter); h is on {h.device}"
            )
        if h.dtype not in TRITON_DTYPES:
            raise TypeError(
                f"h: backend 'triton' supports {TRITON_DTYPES}, got {h.dtype} (use 'torch')"
            )
    return backend


def _check_scaling(scaling) -> float:
    if isinstance(scaling, bool) or not isinstance(scaling, (int, float)):
        raise TypeError(f"scaling: expected a real number, got {type(scaling).__name__}")
    if not math.isfinite(scaling):
        raise ValueError(f"scaling: expected a finite number, got {scaling}")
    return float(scaling)


def _check_mix(h, gates, B) -> None:
    _float_tensor("h", h, 2)
    _float_tensor("gates", gates, 2)
    _float_tensor("B", B, 3)
    _same("B", B, h, "h")
    if gates.device != h.device:
        raise ValueError(f"gates: expected device {h.device} (of h), got {gates.device}")
    N, _, r = B.shape
    if h.shape[1] != r:
        raise ValueError(
            f"h: expected shape (T, r={r}) to match B [N, out, r], got {tuple(h.shape)}"
        )
    if gates.shape != (h.shape[0], N):
        raise ValueError(f"gates: expected shape (T={h.shape[0]}, N={N}), got {tuple(gates.shape)}")


class _ExpertMix(torch.autograd.Function):
    """One GEMM forward and backward over ``K = N·r`` (the layout the Triton kernel shares)."""

    @staticmethod
    def forward(ctx, h, gates, B, scaling):
        T, r = h.shape
        N, out_features, _ = B.shape
        g = gates.to(h.dtype)
        mixed = (g[:, :, None] * h[:, None, :]).reshape(T, N * r)  # g ⊗ h
        flat_B = B.permute(0, 2, 1).reshape(N * r, out_features)
        out = kernel_buffer(T, out_features, dtype=h.dtype, device=h.device)
        torch.mm(mixed, flat_B, out=out)
        out.mul_(scaling)
        ctx.save_for_backward(h, g, B)
        ctx.scaling = scaling
        ctx.gates_dtype = gates.dtype
        return out

    @staticmethod
    def backward(ctx, grad_out):
        h, g, B = ctx.saved_tensors
        s = ctx.scaling
        T, r = h.shape
        N, out_features, _ = B.shape
        grad_h = grad_g = grad_B = None
        grad_out = grad_out.to(h.dtype)
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            flat_B = B.permute(0, 2, 1).reshape(N * r, out_features)
            grad_mixed = (s * grad_out @ flat_B.T).reshape(T, N, r)  # d(g ⊗ h)
            if ctx.needs_input_grad[0]:
                grad_h = torch.einsum("tn,tnr->tr", g, grad_mixed)
            if ctx.needs_input_grad[1]:
                grad_g = torch.einsum("tr,tnr->tn", h, grad_mixed).to(ctx.gates_dtype)
        if ctx.needs_input_grad[2]:
            mixed = (g[:, :, None] * h[:, None, :]).reshape(T, N * r)
            grad_flat = s * mixed.T @ grad_out  # [N·r, out]
            grad_B = grad_flat.reshape(N, r, out_features).permute(0, 2, 1).contiguous()
        return grad_h, grad_g, grad_B, None


class _ExpertMixTriton(_ExpertMix):
    """The Triton kernel's forward; the backward is ``_ExpertMix``'s torch backward (same identity)."""

    @staticmethod
    def forward(ctx, h, gates, B, scaling):
        from .kernels.mix import expert_mix_triton

        T, _ = h.shape
        out = kernel_buffer(T, B.shape[1], dtype=h.dtype, device=h.device)
        expert_mix_triton(h, gates, B, scaling, out)
        ctx.save_for_backward(h, gates.to(h.dtype), B)
        ctx.scaling = scaling
        ctx.gates_dtype = gates.dtype
        return out


def expert_mix(
    h: torch.Tensor,
    gates: torch.Tensor,
    B: torch.Tensor,
    scaling: float = 1.0,
    backend: str = "auto",
) -> torch.Tensor:
    """``y_t = scaling · Σ_n g_{t,n} · B_n h_t`` as one GEMM over ``K = N·r``.

    Args:
        h: ``[T, r]`` low-rank activations ``A·x``.
        gates: ``[T, N]`` router weights (any float dtype; cast to ``h``'s).
        B: ``[N, out, r]`` up-projections, dtype and device of ``h``.
        scaling: ``α / r``.
        backend: ``"auto"`` (Triton on CUDA tensors, torch on CPU), ``"torch"`` (one GEMM),
            ``"triton"`` (the fused kernel, float32/bfloat16/float16; on CPU only under
            ``TRITON_INTERPRET=1``) or ``"reference"`` (a loop over experts). All differentiable;
            the Triton forward's backward is the torch one.

    Returns:
        ``[T, out]`` in ``h``'s dtype.

    Example:
        >>> h, g, B = torch.ones(3, 2), torch.full((3, 4), 0.25), torch.ones(4, 5, 2)
        >>> expert_mix(h, g, B, scaling=2.0)[0]
        tensor([4., 4., 4., 4., 4.])
    """
    _check_backend(backend)
    _check_mix(h, gates, B)
    scaling = _check_scaling(scaling)
    backend = _resolve_mix_backend(backend, h)
    if backend == "reference":
        return expert_mix_reference(h, gates, B, scaling)
    if backend == "triton":
        return _ExpertMixTriton.apply(h, gates, B, scaling)
    return _ExpertMix.apply(h, gates, B, scaling)


def _check_poison(poison, num_experts: int) -> tuple[int, ...]:
    if isinstance(poison, int) and not isinstance(poison, bool):
        poison = (poison,)
    if not isinstance(poison, Sequence) or isinstance(poison, str):
        raise TypeError(
            f"poison: expected a sequence of expert indices, got {type(poison).__name__}"
        )
    result = []
    for d in poison:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"poison: expected integer expert indices, got {d!r}")
        if not 0 <= d < num_experts:
            raise ValueError(f"poison: index {d} out of range for {num_experts} experts")
        if d in result:
            raise ValueError(f"poison: index {d} given twice")
        result.append(d)
    if result and len(result) >= num_experts:
        raise ValueError(
            f"poison: {tuple(result)} leaves no normal expert among {num_experts} experts"
        )
    return tuple(sorted(result))


def _check_compensation(k, beta, num_normal: int) -> tuple[int, float]:
    if k is None:
        k = num_normal
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k: expected an int or None, got {type(k).__name__}")
    if not 0 <= k <= num_normal:
        raise ValueError(f"k: expected 0 <= k <= {num_normal} (the normal experts), got {k}")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)):
        raise TypeError(f"beta: expected a real number, got {type(beta).__name__}")
    if not (math.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta: expected a finite number >= 0, got {beta}")
    return k, float(beta)


def compensate(
    gates: torch.Tensor,
    expert_out: torch.Tensor,
    poison: Sequence[int] | int = (3,),
    k: int | None = None,
    beta: float = 1.0,
    backend: str = "torch",
) -> torch.Tensor:
    """Mask the poisoning experts and hand their router mass to similar normal experts (DyCompEnSate).

    Our reconstruction of the paper's illegible equation (spec §2): ``ω_P = Σ_{d∈P} ω_d``,
    ``θ_i = cos(y_i, Σ_{d∈P} ω_d y_d)``, ``S_K`` the ``k`` normal experts of largest ``θ_i``,
    ``ω̃_i = ω_i + β·ω_P·θ⁺_i / Σ_{j∈S_K} θ⁺_j`` for ``i ∈ S_K``, ``ω̃_d = 0``; where no
    ``θ⁺`` is positive the mass goes to all normal experts in proportion to ``ω_i``. ``k = 0`` is
    plain masking; ``k = N − |P|`` with ``β = 1`` keeps each token's gates summing to what they did.
    Cosines and the new gates are computed in at least float32.

    Args:
        gates: ``[T, N]`` router weights (softmax outputs, ≥ 0).
        expert_out: ``[T, N, out]`` per-expert outputs ``y_i = B_i h``.
        poison: indices of the poisoning experts (empty: gates returned unchanged).
        k: compensating experts, ``0 ≤ k ≤ N − |P|`` (``None``: all normal experts).
        beta: compensation strength, ``≥ 0``.
        backend: ``"torch"`` (vectorised) or ``"reference"`` (a loop over tokens).

    Returns:
        ``[T, N]`` gates in ``gates``' dtype promoted to at least float32, zero on ``poison``.

    Example:
        >>> g = torch.tensor([[0.5, 0.25, 0.25]])
        >>> y = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]])
        >>> compensate(g, y, poison=(2,), k=2)
        tensor([[0.7500, 0.2500, 0.0000]])
    """
    _check_backend(backend, ("torch", "reference"))
    _float_tensor("gates", gates, 2)
    _float_tensor("expert_out", expert_out, 3)
    T, N = gates.shape
    if expert_out.shape[:2] != (T, N):
        raise ValueError(
            f"expert_out: expected shape (T={T}, N={N}, out), got {tuple(expert_out.shape)}"
        )
    if expert_out.device != gates.device:
        raise ValueError(f"expert_out: expected device {gates.device}, got {expert_out.device}")
    poison = _check_poison(poison, N)
    k, beta = _check_compensation(k, beta, N - len(poison))
    dtype = torch.promote_types(torch.promote_types(gates.dtype, expert_out.dtype), torch.float32)
    gates, expert_out = gates.to(dtype), expert_out.to(dtype)
    if not poison:
        return gates
    if backend == "reference":
        return compensate_reference(gates, expert_out, poison, k, beta)
    is_poison = torch.zeros(N, dtype=torch.bool, device=gates.device)
    is_poison[list(poison)] = True
    normal_gates = gates.masked_fill(is_poison, 0.0)
    poison_gates = gates - normal_gates
    if k == 0:
        return normal_gates
    mass = poison_gates.sum(-1, keepdim=True)  # [T, 1]
    y_poison = torch.einsum("tn,tno->to", poison_gates, expert_out)
    dots = torch.einsum("tno,to->tn", expert_out, y_poison)
    norms = torch.linalg.vector_norm(expert_out, dim=-1) * torch.linalg.vector_norm(
        y_poison, dim=-1, keepdim=True
    )
    theta = torch.where(norms > 0, dots / torch.where(norms > 0, norms, 1.0), 0.0)
    ranked = theta.masked_fill(is_poison, -math.inf)
    chosen = torch.zeros(T, N, dtype=torch.bool, device=gates.device).scatter(
        1, ranked.topk(k, dim=-1).indices, True
    )
    positive = theta.clamp(min=0) * chosen
    total = positive.sum(-1, keepdim=True)
    by_cosine = positive / torch.where(total > 0, total, 1.0)
    normal_mass = normal_gates.sum(-1, keepdim=True)
    by_gate = normal_gates / torch.where(normal_mass > 0, normal_mass, 1.0)
    share = torch.where(total > 0, by_cosine, by_gate)
    return normal_gates + beta * mass * share


def route(source: torch.Tensor, router: torch.Tensor) -> torch.Tensor:
    """``ω = softmax(source · W_gᵀ)`` in at least float32. ``[T, d], [N, d] -> [T, N]``.

    Example:
        >>> route(torch.zeros(2, 3), torch.ones(4, 3))[0]
        tensor([0.2500, 0.2500, 0.2500, 0.2500])
    """
    _float_tensor("source", source, 2)
    _float_tensor("router", router, 2)
    if router.shape[1] != source.shape[1]:
        raise ValueError(
            f"router: expected shape (N, {source.shape[1]}) to match source, got {tuple(router.shape)}"
        )
    if router.device != source.device:
        raise ValueError(f"router: expected device {source.device}, got {router.device}")
    dtype = torch.promote_types(torch.promote_types(source.dtype, router.dtype), torch.float32)
    return torch.softmax(source.to(dtype) @ router.to(dtype).T, dim=-1)


def adapter(
    x: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    router: torch.Tensor,
    scaling: float,
    poison: Sequence[int] | int = (),
    mode: str = "all",
    k: int | None = None,
    beta: float = 1.0,
    router_input: str = "x",
    backend: str = "auto",
) -> torch.Tensor:
    """The adapter's addition ``(α/r)·Σ_i ω̃_i B_i A x`` (no dropout; the layer applies it to ``x``).

    In ``mode="inference"`` the poisoning experts are masked and their mass compensated
    (``compensate``); in ``"stage1"``, ``"stage2"`` and ``"all"`` every expert is mixed with its
    softmax gate (the stages differ only in which parameters train, and B_D stays in the forward
    pass in Stage II as the spec says).

    Args:
        x: ``[T, in]`` tokens.
        A: ``[r, in]`` shared down-projection (dtype and device of ``x``).
        B: ``[N, out, r]`` up-projections.
        router: ``[N, in]`` (``router_input="x"``) or ``[N, r]`` (``"lowrank"``).
        scaling: ``α / r``.
        poison: indices of the poisoning experts.
        mode: one of ``MODES``.
        k: compensating experts at inference (``None``: all normal experts).
        beta: compensation strength.
        router_input: ``"x"`` (HydraLoRA's code) or ``"lowrank"`` (route on ``h = A x``).
        backend: ``"auto"``, ``"torch"``, ``"triton"`` (these three differ only in
            ``expert_mix``'s backend) or ``"reference"`` (loops over experts and tokens).

    Returns:
        ``[T, out]`` in ``x``'s dtype.
    """
    _check_backend(backend)
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    if router_input not in ROUTER_INPUTS:
        raise ValueError(f"router_input: expected one of {ROUTER_INPUTS}, got {router_input!r}")
    _float_tensor("x", x, 2)
    _float_tensor("A", A, 2)
    _float_tensor("B", B, 3)
    _float_tensor("router", router, 2)
    for name, t in (("A", A), ("B", B), ("router", router)):
        _same(name, t, x, "x")
    r, in_features = A.shape
    N = B.shape[0]
    if x.shape[1] != in_features:
        raise ValueError(
            f"x: expected shape (T, in={in_features}) to match A, got {tuple(x.shape)}"
        )
    if B.shape[2] != r:
        raise ValueError(f"B: expected shape (N, out, r={r}) to match A, got {tuple(B.shape)}")
    width = in_features if router_input == "x" else r
    if router.shape != (N, width):
        raise ValueError(
            f"router: expected shape ({N}, {width}) for router_input={router_input!r}, "
            f"got {tuple(router.shape)}"
        )
    poison = _check_poison(poison, N)
    k, beta = _check_compensation(k, beta, N - len(poison))
    scaling = _check_scaling(scaling)
    if backend == "reference":
        return adapter_reference(x, A, B, router, scaling, poison, mode, k, beta, router_input)
    h = x @ A.T
    gates = route(x if router_input == "x" else h, router)
    if mode == "inference" and poison:
        expert_out = torch.einsum("tr,nor->tno", h, B)
        gates = compensate(gates, expert_out, poison, k, beta)
    return expert_mix(h, gates, B, scaling, backend=backend)
