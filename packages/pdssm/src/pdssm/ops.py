"""Public ops of pdssm: argument checks, the autograd function and backend dispatch.

The backward of the PD recurrence ``x_t = A_t x_{t-1} + b_t`` (PyTorch's conjugate convention,
``g = ∂L/∂Re + i·∂L/∂Im``) is

* ``g_t = w_t + A_{t+1}^H g_{t+1}`` with ``w_t`` the upstream gradient of ``x_t``;
* ``∂b_t = g_t``; column: ``∂d_t[n] = g_t[p_t[n]]·conj(x_{t-1}[n])``; row:
  ``∂d_t[m] = g_t[m]·conj(x_{t-1}[q_t[m]])``;
* straight-through ``∂P_t`` (rank one per step): column ``Re(g_t ⊗ conj(d_t ⊙ x_{t-1}))``, row
  ``Re((conj(d_t) ⊙ g_t) ⊗ conj(x_{t-1}))``.

``A^H`` of a column PD matrix is a row PD matrix with the same indices and ``conj(d)`` (and vice
versa), so the reverse recurrence for ``g`` is the *other* orientation's forward scan run backwards
in time. Every backend therefore reuses its own forward scan for the backward pass.
"""

from __future__ import annotations

import torch

from .reference import dense_scan, transition_matrices
from .scan import parallel_states, sequential_states

__all__ = ["pd_scan"]

ORIENTATIONS = ("column", "row")
BACKENDS = ("auto", "sequential", "reference", "torch", "dense", "triton", "triton_chunked")


def _other(orientation: str) -> str:
    return "row" if orientation == "column" else "column"


def _states(p, d, b, x0, orientation: str, backend: str) -> torch.Tensor:
    if backend == "sequential":
        return sequential_states(p, d, b, x0, orientation)
    if backend == "torch":
        return parallel_states(p, d, b, x0, orientation)
    if backend == "triton":
        from .kernels.scan import triton_states

        return triton_states(p, d, b, x0, orientation)
    if backend == "triton_chunked":
        from .kernels.scan import default_chunk, triton_states

        return triton_states(p, d, b, x0, orientation, chunk=default_chunk(b.shape[1]))
    raise AssertionError(f"unreachable backend {backend!r}")


class _PDScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, p, d, b, x0, p_matrix, orientation, backend):
        x = _states(p, d, b, x0, orientation, backend)
        ctx.save_for_backward(p, d, x0, x)
        ctx.orientation = orientation
        ctx.backend = backend
        ctx.matrix_dtype = p_matrix.dtype if p_matrix is not None else None
        return x

    @staticmethod
    def backward(ctx, grad_x):
        p, d, x0, x = ctx.saved_tensors
        orientation, backend = ctx.orientation, ctx.backend
        batch, _, size = d.shape
        grad_x = grad_x.contiguous()
        # Reverse-time scan for g: step s uses A_{L+2-s}^H; step 1 has no transition (g_{L+1} = 0),
        # so it gets the identity with a zero diagonal.
        identity = torch.arange(size, device=p.device).expand(batch, 1, size)
        p_rev = torch.cat([identity, p[:, 1:].flip(1)], dim=1)
        d_rev = torch.cat([torch.zeros_like(d[:, :1]), d[:, 1:].flip(1).conj()], dim=1)
        zero = torch.zeros_like(x0)
        g = _states(p_rev, d_rev, grad_x.flip(1), zero, _other(orientation), backend).flip(1)

        x_prev = torch.cat([x0.unsqueeze(1), x[:, :-1]], dim=1)
        grad_d = grad_b = grad_x0 = grad_matrix = None
        if ctx.needs_input_grad[1]:
            if orientation == "column":
                grad_d = g.gather(-1, p) * x_prev.conj()
            else:
                grad_d = g * x_prev.gather(-1, p).conj()
        if ctx.needs_input_grad[2]:
            grad_b = g
        if ctx.needs_input_grad[3]:
            # ∂x0 = A_1^H g_1.
            if orientation == "column":
                grad_x0 = d[:, 0].conj() * g[:, 0].gather(-1, p[:, 0])
            else:
                grad_x0 = torch.zeros_like(x0).scatter_add(-1, p[:, 0], d[:, 0].conj() * g[:, 0])
        if ctx.needs_input_grad[4]:
            # Re(u ⊗ conj(v)) = Re u ⊗ Re v + Im u ⊗ Im v: one real batched matmul with inner size 2.
            left, right = (g, d * x_prev) if orientation == "column" else (d.conj() * g, x_prev)
            grad_matrix = torch.matmul(
                torch.view_as_real(left), torch.view_as_real(right).transpose(-1, -2)
            )
            grad_matrix = grad_matrix.to(ctx.matrix_dtype)
        return None, grad_d, grad_b, grad_x0, grad_matrix, None, None


def _check_inputs(p, d, b, x0, orientation, backend):
    """Validate every argument before anything is computed; return (indices, matrix, x0)."""
    if orientation not in ORIENTATIONS:
        raise ValueError(f"orientation: expected one of {ORIENTATIONS}, got {orientation!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    for name, t in (("p", p), ("d", d), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    for name, t in (("d", d), ("b", b)):
        if not t.is_complex():
            raise TypeError(
                f"{name}: expected a complex tensor (complex64 or complex128), got {t.dtype}"
            )
    if d.dtype != b.dtype:
        raise TypeError(f"b: expected the dtype of d ({d.dtype}), got {b.dtype}")
    if d.dim() != 3:
        raise ValueError(f"d: expected shape (B, L, N), got {tuple(d.shape)}")
    if b.shape != d.shape:
        raise ValueError(f"b: expected the shape of d {tuple(d.shape)}, got {tuple(b.shape)}")
    batch, length, size = d.shape
    if batch < 1 or length < 1 or size < 1:
        raise ValueError(f"d: expected B, L, N >= 1, got shape {tuple(d.shape)}")
    if b.device != d.device or p.device != d.device:
        raise ValueError(
            f"p, b: expected the device of d ({d.device}), got {p.device} and {b.device}"
        )

    matrix = None
    if p.is_complex() or p.dtype == torch.bool:
        raise TypeError(f"p: expected integer indices or a real matrix, got {p.dtype}")
    if p.is_floating_point():
        if p.shape != (batch, length, size, size):
            raise ValueError(
                f"p: a matrix p must have shape (B, L, N, N) = {(batch, length, size, size)}, got {tuple(p.shape)}"
            )
        matrix = p
        indices = p.detach().argmax(dim=-2 if orientation == "column" else -1)
    else:
        if p.shape != d.shape:
            raise ValueError(
                f"p: expected index shape (B, L, N) = {tuple(d.shape)}, got {tuple(p.shape)}"
            )
        low, high = int(p.min()), int(p.max())
        if low < 0 or high >= size:
            raise ValueError(
                f"p: indices must lie in [0, N) = [0, {size}), got values in [{low}, {high}]"
            )
        indices = p.long()

    if x0 is None:
        x0 = torch.zeros(batch, size, dtype=d.dtype, device=d.device)
        x0[:, 0] = 1
    else:
        if not isinstance(x0, torch.Tensor):
            raise TypeError(f"x0: expected a torch.Tensor or None, got {type(x0).__name__}")
        if x0.dtype != d.dtype:
            raise TypeError(f"x0: expected the dtype of d ({d.dtype}), got {x0.dtype}")
        if x0.shape != (batch, size):
            raise ValueError(f"x0: expected shape (B, N) = {(batch, size)}, got {tuple(x0.shape)}")
        if x0.device != d.device:
            raise ValueError(f"x0: expected the device of d ({d.device}), got {x0.device}")

    check_backend(d, backend)
    return indices, matrix, x0


def check_backend(d: torch.Tensor, backend: str) -> None:
    """Raise if ``backend`` is unknown or cannot run on ``d`` (dtype, device, interpreter)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if backend.startswith("triton"):
        from neurips25_core.device import triton_available, triton_interpret

        if d.dtype != torch.complex64:
            raise TypeError(f"d: backend {backend!r} supports complex64 only, got {d.dtype}")
        if not triton_available():
            raise ValueError(f"backend: {backend!r} requested but triton is not installed")
        if not d.is_cuda and not triton_interpret():
            raise ValueError(
                f"backend: {backend!r} needs CUDA tensors, or TRITON_INTERPRET=1 for CPU tensors; "
                f"got device {d.device} without the interpreter"
            )


def pd_scan(
    p: torch.Tensor,
    d: torch.Tensor,
    b: torch.Tensor,
    x0: torch.Tensor | None = None,
    orientation: str = "column",
    backend: str = "auto",
) -> torch.Tensor:
    """All states of the PD-SSM recurrence ``x_t = P_t D_t x_{t-1} + b_t``.

    Args:
        p: the one-hot factor, either int (B, L, N) indices (column orientation: ``p[..., n]`` is
            the row of column ``n``'s nonzero; row orientation: ``q[..., m]`` the column of row
            ``m``'s nonzero), or a real (B, L, N, N) matrix (e.g. the straight-through
            ``(hard − soft).detach() + soft``) whose argmax over the one-hot axis gives the indices
            and which receives the rank-one straight-through gradient.
        d: complex (B, L, N) diagonals ``D_t``.
        b: complex (B, L, N) inputs ``b_t = B u_t``.
        x0: complex (B, N) initial state; None means ``e_0`` (the official PyTorch choice).
        orientation: ``"column"`` (``A = P·D``, the paper, default) or ``"row"``
            (``A = D·P``, the official PyTorch numerics).
        backend: ``"sequential"`` (alias ``"reference"``: a loop over time, the fastest on CPU),
            ``"torch"`` (Hillis–Steele parallel scan over ``(p, d, b)``), ``"dense"`` (the official
            materialised N×N loop with plain autograd: the baseline), ``"triton"`` (complex64;
            one program per sequence walking all L steps; CUDA, or CPU under
            ``TRITON_INTERPRET=1``), ``"triton_chunked"`` (the three-phase chunked Triton scan,
            chunks of ≈√L steps), ``"auto"`` (``"triton"`` on CUDA complex64 tensors,
            ``"sequential"`` otherwise).

    Returns:
        complex (B, L, N): the states ``x_1 .. x_L``.

    Raises:
        TypeError: non-complex ``d``/``b``, mismatched dtypes, complex128 with a Triton backend.
        ValueError: bad shapes, indices out of ``[0, N)``, unknown orientation/backend, ``"triton"``
            on CPU tensors without the interpreter.

    Example:
        >>> import torch
        >>> from pdssm import pd_scan
        >>> p = torch.randint(0, 4, (2, 5, 4))
        >>> d = torch.polar(torch.full((2, 5, 4), 0.9), torch.rand(2, 5, 4))
        >>> b = torch.randn(2, 5, 4, dtype=torch.complex64)
        >>> pd_scan(p, d, b).shape
        torch.Size([2, 5, 4])
    """
    indices, matrix, x0 = _check_inputs(p, d, b, x0, orientation, backend)
    return scan_checked(indices, matrix, d, b, x0, orientation, backend)


def scan_checked(
    indices: torch.Tensor,
    matrix: torch.Tensor | None,
    d: torch.Tensor,
    b: torch.Tensor,
    x0: torch.Tensor,
    orientation: str,
    backend: str,
) -> torch.Tensor:
    """:func:`pd_scan` after the checks, with the indices already known (used by the layer).

    ``matrix`` (or None) only routes the straight-through gradient: the forward value is always
    the one-hot of ``indices``, so passing the *soft* matrix here is the straight-through
    estimator ``(hard − soft).detach() + soft`` without materialising ``hard``.
    """
    if backend == "auto":
        from neurips25_core.device import use_triton_for

        backend = "triton" if (use_triton_for(d) and d.dtype == torch.complex64) else "sequential"
    if backend == "reference":
        backend = "sequential"
    if backend == "dense":
        if matrix is None:
            a = transition_matrices(indices, d, orientation)
        else:
            hard = torch.nn.functional.one_hot(indices, d.shape[-1]).to(matrix.dtype)
            hard = hard.transpose(-1, -2) if orientation == "column" else hard
            # Value: the hard one-hot; gradient: whatever flows into ``matrix`` (straight-through).
            a = transition_matrices(hard + (matrix - matrix.detach()), d, orientation)
        return dense_scan(a, b, x0)
    return _PDScan.apply(indices, d, b, x0, matrix, orientation, backend)
