"""The functional core of logic gate networks: the gate table, the relaxation, Gumbel-ST, wirings.

Gate ids follow ``difflogic/functional.py``: ``id = 8·f(0,0) + 4·f(0,1) + 2·f(1,0) + f(1,1)``.
With ``a, b ∈ [0, 1]`` read as independent Bernoulli probabilities, gate ``id`` relaxes to its
expectation ``E[f(A, B)]``, which is affine in ``(1, a, b, ab)``; :func:`gate_table` holds those
coefficients. A layer therefore needs only ``(α, β, γ, δ) = w·T`` per neuron and four FMAs per
sample, whatever the mixture ``w`` over the 16 gates is.
"""

from __future__ import annotations

import functools

import torch

__all__ = [
    "GATE_NAMES",
    "gate_table",
    "gumbel_noise",
    "gumbel_st",
    "logic_layer_torch",
    "random_connections",
    "relaxed_gates",
    "truth_table",
    "unique_connections",
]

GATE_NAMES = (
    "0",
    "AND",
    "A∧¬B",
    "A",
    "¬A∧B",
    "B",
    "XOR",
    "OR",
    "NOR",
    "XNOR",
    "¬B",
    "B⇒A",
    "¬A",
    "A⇒B",
    "NAND",
    "1",
)


def truth_table() -> torch.Tensor:
    """The truth bits of the 16 gates.

    Returns:
        (16, 4) int64 ``F`` with ``F[id] = (f(0,0), f(0,1), f(1,0), f(1,1))``.

    Example:
        >>> truth_table()[6].tolist()  # XOR
        [0, 1, 1, 0]
    """
    ids = torch.arange(16)
    return torch.stack([(ids >> 3) & 1, (ids >> 2) & 1, (ids >> 1) & 1, ids & 1], dim=1)


@functools.lru_cache(maxsize=16)
def _cached_table(dtype: torch.dtype, device: str) -> torch.Tensor:
    f = truth_table().to(torch.float64)
    f00, f01, f10, f11 = f.unbind(1)
    # Multilinear extension of the truth table = the Bernoulli expectation.
    table = torch.stack([f00, f10 - f00, f01 - f00, f00 - f01 - f10 + f11], dim=1)
    return table.to(dtype=dtype, device=device)


def gate_table(
    dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """The coefficients of every relaxed gate on ``(1, a, b, ab)``.

    Args:
        dtype: floating dtype of the table.
        device: its device.

    Returns:
        (16, 4) ``T`` with ``h_id(a, b) = T[id, 0] + T[id, 1]·a + T[id, 2]·b + T[id, 3]·ab``.

    Example:
        >>> gate_table()[6].tolist()  # XOR = a + b - 2ab
        [0.0, 1.0, 1.0, -2.0]
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype: expected a floating torch.dtype, got {dtype!r}")
    return _cached_table(dtype, str(torch.device(device))).clone()


def relaxed_gates(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The relaxed gate mixture ``Σ_i w_i h_i(a, b)`` per neuron.

    Args:
        a: (..., n) first inputs in [0, 1].
        b: (..., n) second inputs, same shape as ``a``.
        w: (n, 16) weights over the 16 gates (a distribution, or one-hot for a discrete circuit).

    Returns:
        (..., n) outputs.

    Example:
        >>> a = torch.tensor([0.0, 1.0])
        >>> b = torch.tensor([1.0, 1.0])
        >>> w = torch.nn.functional.one_hot(torch.tensor([6, 1]), 16).float()  # XOR, AND
        >>> relaxed_gates(a, b, w).tolist()
        [1.0, 1.0]
    """
    for name, t in (("a", a), ("b", b), ("w", w)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name}: expected a floating dtype, got {t.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"b: expected the shape of a {tuple(a.shape)}, got {tuple(b.shape)}")
    if w.ndim != 2 or w.shape[1] != 16 or (a.ndim and w.shape[0] != a.shape[-1]):
        n = a.shape[-1] if a.ndim else "n"
        raise ValueError(f"w: expected shape ({n}, 16), got {tuple(w.shape)}")
    c = w @ gate_table(w.dtype, w.device)
    return c[:, 0] + c[:, 1] * a + c[:, 2] * b + c[:, 3] * (a * b)


def gumbel_noise(
    shape: tuple[int, ...],
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """Standard Gumbel(0, 1) samples ``-log(-log U)``, ``U ~ Uniform(0, 1)`` (always finite).

    ``torch.rand`` plus two logs is ~10× faster on CPU than ``Tensor.exponential_`` with a
    generator (which dominated a GLGN step at 3 × 4000 neurons).

    Example:
        >>> gumbel_noise((2, 16), torch.Generator().manual_seed(0)).shape
        torch.Size([2, 16])
    """
    u = torch.rand(shape, generator=generator, dtype=dtype, device=device)
    tiny = torch.finfo(dtype).tiny
    e = (-torch.log(u.clamp_(min=tiny))).clamp_(min=tiny)  # Exp(1), > 0
    return -torch.log(e)


class _GumbelST(torch.autograd.Function):
    """Exact one-hot forward; backward through softmax((z + g)/τ) (straight-through)."""

    @staticmethod
    def forward(ctx, z, noise, tau):
        perturbed = z if noise is None else z + noise
        index = perturbed.argmax(dim=-1, keepdim=True)
        hard = torch.zeros_like(z).scatter_(-1, index, 1.0)
        ctx.save_for_backward(torch.softmax(perturbed / tau, dim=-1))
        ctx.tau = tau
        return hard

    @staticmethod
    def backward(ctx, grad_w):
        (s,) = ctx.saved_tensors
        inner = (grad_w * s).sum(dim=-1, keepdim=True)
        return s * (grad_w - inner) / ctx.tau, None, None


def gumbel_st(
    z: torch.Tensor,
    tau: float = 1.0,
    generator: torch.Generator | None = None,
    *,
    noise: bool | torch.Tensor = True,
) -> torch.Tensor:
    """Gumbel straight-through: one-hot ``argmax(z + g)`` forward, Gumbel-softmax backward.

    The forward is exactly one-hot (``F.gumbel_softmax(hard=True)`` returns
    ``y_hard - y_soft.detach() + y_soft``, which can be ``1 - ulp`` in fp32). The backward is
    ``∂L/∂z = (1/τ)·s ⊙ (∂L/∂w − ⟨∂L/∂w, s⟩)`` with ``s = softmax((z + g)/τ)``.

    Args:
        z: (..., 16) logits (any last size works).
        tau: the Gumbel-softmax temperature τ > 0 of the backward.
        generator: where the noise comes from (None: torch's global RNG).
        noise: True draws fresh noise of ``z``'s shape; False uses none (the ``hard_st``
            ablation); a tensor of ``z``'s shape is used as the noise itself.

    Returns:
        One-hot weights of ``z``'s shape and dtype.

    Example:
        >>> z = torch.zeros(3, 16, requires_grad=True)
        >>> w = gumbel_st(z, 1.0, torch.Generator().manual_seed(0))
        >>> w.sum(-1).tolist(), bool(((w == 0) | (w == 1)).all())
        ([1.0, 1.0, 1.0], True)
    """
    if not isinstance(z, torch.Tensor) or not z.is_floating_point():
        raise TypeError(f"z: expected a floating torch.Tensor, got {getattr(z, 'dtype', type(z))}")
    if not isinstance(tau, (int, float)) or isinstance(tau, bool) or not tau > 0:
        raise ValueError(f"tau: expected a number > 0, got {tau!r}")
    if isinstance(noise, torch.Tensor):
        if noise.shape != z.shape:
            raise ValueError(f"noise: expected shape {tuple(z.shape)}, got {tuple(noise.shape)}")
        g = noise.to(z.dtype)
    elif noise is True:
        g = gumbel_noise(tuple(z.shape), generator, z.dtype, z.device)
    elif noise is False:
        g = None
    else:
        raise TypeError(f"noise: expected a bool or a tensor, got {type(noise).__name__}")
    return _GumbelST.apply(z, g, float(tau))


def random_connections(
    in_dim: int, out_dim: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """difflogic's ``random`` wiring: a permutation of ``2·out`` indices taken mod ``in``, relabelled.

    The two inputs of a neuron may coincide.

    Returns:
        ``(a, b)``, two (out_dim,) int64 index tensors into the input features.
    """
    c = torch.randperm(2 * out_dim, generator=generator) % in_dim
    c = torch.randperm(in_dim, generator=generator)[c]
    return c[:out_dim].contiguous(), c[out_dim:].contiguous()


def unique_connections(
    in_dim: int, out_dim: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``unique`` wiring of GLGN's ``main.py``: pairs at offset 1 (even, then odd starts),
    then offsets 2, 3, …, truncated to ``out_dim`` and shuffled. Every input is used and no neuron
    sees one input twice (for ``in_dim ≥ 2``). Needs ``2·out_dim ≥ in_dim``.

    Returns:
        ``(a, b)``, two (out_dim,) int64 index tensors into the input features.

    Example:
        >>> a, b = unique_connections(6, 3, torch.Generator().manual_seed(0))
        >>> sorted(zip(a.tolist(), b.tolist()))
        [(0, 1), (2, 3), (4, 5)]
    """
    if 2 * out_dim < in_dim:
        raise ValueError(
            f"out_dim: 'unique' wiring needs 2*out_dim >= in_dim, got out_dim={out_dim}, "
            f"in_dim={in_dim}"
        )
    x = torch.arange(in_dim)
    firsts, seconds = [x[0::2][: in_dim // 2]], [x[1::2][: in_dim // 2]]
    total = in_dim // 2
    if total < out_dim:
        m = (in_dim - 1) // 2
        firsts.append(x[1::2][:m])
        seconds.append(x[2::2][:m])
        total += m
    offset = 2
    while total < out_dim:
        if offset >= in_dim:
            raise ValueError(
                f"out_dim: 'unique' wiring of {in_dim} inputs has only {total} distinct pairs, "
                f"got out_dim={out_dim}"
            )
        firsts.append(x[:-offset])
        seconds.append(x[offset:])
        total += in_dim - offset
        offset += 1
    a = torch.cat(firsts)[:out_dim]
    b = torch.cat(seconds)[:out_dim]
    perm = torch.randperm(out_dim, generator=generator)
    return a[perm].contiguous(), b[perm].contiguous()


class _LogicLayerTorch(torch.autograd.Function):
    """``y = α + β·a + γ·b + δ·ab`` with ``a = x[:, ia]``, ``b = x[:, ib]``, ``(α, β, γ, δ) = w·T``.

    The backward recomputes the gathers (nothing of size (B, out) is saved), reduces the four
    coefficient sums over the batch, and scatters the input grads with ``index_add_``
    (deterministic on CPU).
    """

    @staticmethod
    def forward(ctx, x, ia, ib, w):
        table = gate_table(x.dtype, x.device)
        c = w.to(x.dtype) @ table
        a = x.index_select(1, ia)
        b = x.index_select(1, ib)
        # α + a·(β + δ·b) + γ·b
        y = torch.addcmul(c[:, 2] * b + c[:, 0], a, torch.addcmul(c[:, 1], c[:, 3], b))
        ctx.save_for_backward(x, ia, ib, c, table)
        ctx.w_dtype = w.dtype
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, ia, ib, c, table = ctx.saved_tensors
        a = x.index_select(1, ia)
        b = x.index_select(1, ib)
        grad_x = grad_w = None
        if ctx.needs_input_grad[3]:
            ga = grad_y * a
            grad_c = torch.stack(
                [grad_y.sum(0), ga.sum(0), (grad_y * b).sum(0), (ga * b).sum(0)], dim=1
            )
            grad_w = (grad_c @ table.T).to(ctx.w_dtype)
        if ctx.needs_input_grad[0]:
            grad_a = grad_y * torch.addcmul(c[:, 1], c[:, 3], b)
            grad_b = grad_y * torch.addcmul(c[:, 2], c[:, 3], a)
            grad_x = torch.zeros_like(x).index_add_(1, ia, grad_a).index_add_(1, ib, grad_b)
        return grad_x, None, None, grad_w


def logic_layer_torch(
    x: torch.Tensor, ia: torch.Tensor, ib: torch.Tensor, w: torch.Tensor
) -> torch.Tensor:
    """The CPU (torch) logic layer: (B, in) → (B, out), differentiable in ``x`` and ``w``.

    Args:
        x: (B, in) float inputs.
        ia: (out,) int64 first-input indices.
        ib: (out,) int64 second-input indices.
        w: (out, 16) gate weights.

    Example:
        >>> x = torch.tensor([[0.0, 1.0]])
        >>> w = torch.nn.functional.one_hot(torch.tensor([7]), 16).float()  # OR
        >>> logic_layer_torch(x, torch.tensor([0]), torch.tensor([1]), w).tolist()
        [[1.0]]
    """
    return _LogicLayerTorch.apply(x, ia, ib, w)
