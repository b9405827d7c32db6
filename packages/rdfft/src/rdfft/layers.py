"""Block-circulant layers and the block-circulant adapter (BCA) on rdFFT, plus ``apply_bca``.

A block-circulant matrix W (d_out × d_in) is made of p×p blocks ``C_ij = circ(c_ij)``
(:func:`rdfft.reference.block_circulant_dense`), so ``W x`` is, per output block i,
``Σ_j c_ij ⊛ x_j``, and in the frequency domain ``Y_i = Σ_j P_ij · X_j``. Three backends compute it:

* ``"rdfft"``: ``X = rdfft_(x_blocks)`` in place, ``P = rdfft(c)``, ``Z = hc_matmul(X, P)``,
  ``y = irdfft_(Z)``. Autograd keeps the halfcomplex X (p reals per block) and P only; the
  transforms save nothing.
* ``"rfft"``: the same with complex ``torch.fft.rfft``/``irfft`` and plain autograd (what a user
  writes with ``torch.fft``).
* ``"dense"``: the dense matrix, ``F.linear``.

Reconstruct mode (``BlockCirculantLinear(n, n, p, reconstruct=True)``, square layers, rdfft
backend): the output overwrites the input's buffer and nothing but the output (which the next
layer usually keeps anyway) and ``c`` is saved; backward recovers ``X = P⁻¹ Y`` per frequency
(``X = Y ⊘ P`` for one block), then recomputes. This is the spec's reading of the paper's
"zero-cache updates via matrix inverses"; it is not in the released code. P must be well
conditioned (checked before anything is overwritten).

Example (CPU):

    >>> import torch
    >>> from rdfft.layers import BCAdapter
    >>> base = torch.nn.Linear(64, 32, bias=False)
    >>> adapter = BCAdapter(base, block_size=16)
    >>> x = torch.randn(5, 64)
    >>> torch.equal(adapter(x), base(x))  # c = 0 at init
    True
    >>> adapter.merge().shape, adapter.num_adapter_parameters
    (torch.Size([32, 64]), 128)
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from rdfft.layout import complex_to_hc, hc_to_complex, is_power_of_two
from rdfft.ops import hc_matmul, irdfft_, rdfft, rdfft_
from rdfft.reference import block_circulant_dense

__all__ = [
    "BACKENDS",
    "BCAdapter",
    "BlockCirculantLinear",
    "SpectrumCache",
    "apply_bca",
    "bca_parameter_groups",
    "block_circulant_matmul",
    "circulant_reconstruct_",
]

BACKENDS = ("rdfft", "rfft", "dense")


def _check_block(in_features: int, out_features: int, block_size: int) -> None:
    for name, v in (("in_features", in_features), ("out_features", out_features)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name}: expected a positive int, got {v!r}")
    if not isinstance(block_size, int) or block_size < 2 or not is_power_of_two(block_size):
        raise ValueError(f"block_size: expected a power of two >= 2, got {block_size!r}")
    for name, v in (("in_features", in_features), ("out_features", out_features)):
        if v % block_size:
            raise ValueError(f"block_size: {block_size} does not divide {name}={v}")


def _check_layer_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")


def block_circulant_matmul(
    x: torch.Tensor,
    c: torch.Tensor,
    backend: str = "rdfft",
    overwrite_input: bool = False,
    spectrum_cache: SpectrumCache | None = None,
) -> torch.Tensor:
    """``y = W x`` for the block-circulant W of coefficients ``c``.

    Args:
        x: (..., q_in·p) input.
        c: (q_out, q_in, p) coefficients, p a power of two.
        backend: "rdfft", "rfft" or "dense".
        overwrite_input: rdfft backend only: transform x's own buffer in place (x then holds X).
            Only for an x that nothing reads afterwards; autograd raises if something saved it.
        spectrum_cache: rdfft backend only: a :class:`SpectrumCache` shared by the layers that
            read the same x, so X is computed and kept once.

    Returns:
        (..., q_out·p), x's dtype.
    """
    _check_layer_backend(backend)
    if c.dim() != 3:
        raise ValueError(f"c: expected (q_out, q_in, p), got shape {tuple(c.shape)}")
    q_out, q_in, p = c.shape
    if x.shape[-1] != q_in * p:
        raise ValueError(f"x: expected last dim q_in·p = {q_in * p}, got {x.shape[-1]}")
    lead = x.shape[:-1]
    if backend == "dense":
        return F.linear(x, block_circulant_dense(c).to(x.dtype))
    blocks = x.reshape(*lead, q_in, p)
    if backend == "rfft":
        spectrum = torch.einsum(
            "...jk,ijk->...ik", torch.fft.rfft(blocks), torch.fft.rfft(c.to(x.dtype))
        )
        return torch.fft.irfft(spectrum, n=p).reshape(*lead, q_out * p)
    spectra = spectrum_cache.get(x, p) if spectrum_cache is not None else None
    if spectra is None:
        if overwrite_input and blocks.data_ptr() == x.data_ptr() and blocks.is_contiguous():
            spectra = rdfft_(blocks)
        else:
            spectra = rdfft(blocks)
            if spectrum_cache is not None:
                spectrum_cache.put(x, p, spectra)
    z = hc_matmul(spectra, rdfft(c.to(x.dtype)))
    return irdfft_(z).reshape(*lead, q_out * p)


def _spectral_matrices(c: torch.Tensor) -> torch.Tensor:
    """(K, q_out, q_in) complex: the per-frequency matrices P_k of the block-circulant W."""
    work = torch.float64 if c.dtype == torch.float64 else torch.float32
    return hc_to_complex(rdfft(c.detach().to(work))).permute(2, 0, 1)


def _check_conditioning(c: torch.Tensor, eps: float) -> None:
    """Refuse a P whose smallest singular value (over all frequencies) is below eps·largest."""
    sv = torch.linalg.svdvals(_spectral_matrices(c))
    smallest, largest = sv.min().item(), sv.max().item()
    if not smallest > eps * largest:
        raise ValueError(
            f"c: reconstruct mode needs a well-conditioned P: min singular value over the "
            f"frequencies {smallest:.3g} <= reconstruct_eps·max = {eps:g}·{largest:.3g}; "
            "use reconstruct=False (cache mode)"
        )


def _reconstruct_input(y: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """x = W⁻¹ y for the square block-circulant W of ``c``: X_k = P_k⁻¹ Y_k per frequency."""
    q, _, p = c.shape
    lead = y.shape[:-1]
    work = torch.float64 if y.dtype == torch.float64 else torch.float32
    yc = hc_to_complex(rdfft(y.detach().to(work).reshape(-1, q, p)))  # (R, q, K)
    xk = torch.linalg.solve(_spectral_matrices(c), yc.permute(2, 1, 0))  # (K, q, R)
    x = irdfft_(complex_to_hc(xk.permute(2, 1, 0), p).contiguous())
    return x.reshape(*lead, q * p).to(y.dtype)


class _ReconstructCirculant(torch.autograd.Function):
    """``x ← W x + b`` in x's own buffer; saves only the output and c (and the bias)."""

    @staticmethod
    def forward(ctx, x, c, bias):
        q, _, p = c.shape
        blocks = x.view(*x.shape[:-1], q, p)
        spectra = rdfft(c.to(x.dtype))
        # grad mode is off inside forward: the transforms below are the raw in-place ones
        z = hc_matmul(rdfft_(blocks), spectra)  # a transient the size of x
        blocks.copy_(irdfft_(z))
        if bias is not None:
            x.add_(bias.to(x.dtype))
        ctx.mark_dirty(x)
        ctx.has_bias = bias is not None
        ctx.save_for_backward(x, c, bias)
        return x

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        y, c, bias = ctx.saved_tensors
        with torch.no_grad():
            pre = y - bias.to(y.dtype) if bias is not None else y
            x = _reconstruct_input(pre, c)
        need_x, need_c, need_b = ctx.needs_input_grad
        grad_x = grad_c = grad_b = None
        if need_x or need_c:
            with torch.enable_grad():
                xr = x.detach().requires_grad_(need_x)
                cr = c.detach().requires_grad_(need_c)
                out = block_circulant_matmul(xr, cr, "rdfft")
                wrt = [t for t, need in ((xr, need_x), (cr, need_c)) if need]
                grads = list(torch.autograd.grad(out, wrt, g))
            grad_x = grads.pop(0) if need_x else None
            grad_c = grads.pop(0) if need_c else None
        if need_b:
            grad_b = g.reshape(-1, g.shape[-1]).sum(0).to(bias.dtype)
        return grad_x, grad_c, grad_b


def circulant_reconstruct_(
    x: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None = None, eps: float = 1e-3
) -> torch.Tensor:
    """``x ← W x (+ bias)`` in place for a square block-circulant W, with a cache-free backward.

    Autograd keeps only the returned tensor (x's buffer, now the output) and ``c``; backward
    rebuilds the input as ``X_k = P_k⁻¹ Y_k`` at every frequency k (``X = Y ⊘ P`` for one block)
    and recomputes the layer. Nothing may modify the output before backward (autograd checks).

    Args:
        x: (..., q·p) contiguous; overwritten with the output and returned.
        c: (q, q, p) coefficients, p a power of two.
        bias: optional (q·p,) bias.
        eps: refuse when min singular value of P ≤ eps · max (over all frequencies).

    Example:
        >>> import torch
        >>> c = torch.zeros(1, 1, 8)
        >>> c[0, 0, 0] = 2.0  # W = 2·I
        >>> x = torch.arange(8.0)
        >>> circulant_reconstruct_(x, c) is x, x[:3].tolist()
        (True, [0.0, 2.0, 4.0])
    """
    if not isinstance(x, torch.Tensor) or x.dtype not in (
        torch.float32,
        torch.float64,
        torch.bfloat16,
    ):
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"x: expected a float32/float64/bfloat16 tensor, got {got}")
    if not isinstance(c, torch.Tensor) or c.dim() != 3 or c.shape[0] != c.shape[1]:
        got = tuple(c.shape) if isinstance(c, torch.Tensor) else type(c).__name__
        raise ValueError(f"c: reconstruct mode needs square (q, q, p) coefficients, got {got}")
    q, _, p = c.shape
    if not is_power_of_two(p) or p < 2:
        raise ValueError(f"c: block size c.shape[-1] must be a power of two >= 2, got {p}")
    if x.dim() == 0 or x.shape[-1] != q * p:
        raise ValueError(f"x: expected last dim q·p = {q * p}, got shape {tuple(x.shape)}")
    if not x.is_contiguous():
        raise ValueError("x: reconstruct mode overwrites x in place and needs it contiguous")
    if x.is_leaf and x.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            "x: a leaf tensor that requires grad cannot be overwritten in place; pass a "
            "non-leaf (e.g. x * 1) or use reconstruct=False"
        )
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.shape != (q * p,)):
        got = tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__
        raise ValueError(f"bias: expected shape ({q * p},), got {got}")
    _check_conditioning(c, eps)
    return _ReconstructCirculant.apply(x, c, bias)


class SpectrumCache:
    """Shares ``X = rdfft(x)`` among the adapters that read the same input in one forward.

    In a Llama block q_proj, k_proj and v_proj all read the normed hidden state; with adapters on
    q_proj and v_proj each would clone and transform it, and autograd would keep two identical
    halfcomplex spectra. Adapters holding the same cache look their input up here first: a hit
    needs the very same tensor object (weakly referenced), unchanged since (``_version``), the
    same block size and grad mode, and a spectrum autograd still holds (weakly referenced, so the
    cache itself never keeps a spectrum alive). Gradients from every reader accumulate on the one
    X, then flow through one inverse transform: exactly the gradient of separate spectra.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple] = {}

    # Entries are per forward pass: a copied or pickled model starts with an empty cache.
    def __deepcopy__(self, memo: dict) -> SpectrumCache:
        return SpectrumCache()

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._entries = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"SpectrumCache(entries={len(self._entries)})"

    def get(self, x: torch.Tensor, block_size: int) -> torch.Tensor | None:
        entry = self._entries.get(id(x))
        if entry is None:
            return None
        x_ref, version, p, grad_mode, spectra_ref = entry
        spectra = spectra_ref()
        if (
            x_ref() is not x
            or x._version != version
            or p != block_size
            or grad_mode != torch.is_grad_enabled()
            or spectra is None
        ):
            return None
        return spectra

    def put(self, x: torch.Tensor, block_size: int, spectra: torch.Tensor) -> None:
        key = id(x)
        entries = self._entries
        x_ref = weakref.ref(x, lambda _, key=key: entries.pop(key, None))
        entries[key] = (
            x_ref,
            x._version,
            block_size,
            torch.is_grad_enabled(),
            weakref.ref(spectra),
        )


class BlockCirculantLinear(nn.Module):
    """A linear layer whose weight is block-circulant: ``(d_out/p)·(d_in/p)·p`` parameters.

    Args:
        in_features: d_in, divisible by ``block_size``.
        out_features: d_out, divisible by ``block_size``.
        block_size: p, a power of two >= 2.
        backend: "rdfft" (in-place halfcomplex), "rfft" (complex torch.fft) or "dense".
        bias: add a learnable bias.
        dtype: parameter dtype.
        reconstruct: square layers, rdfft backend: the output overwrites the input's buffer
            and backward rebuilds the input from the output (``X = P⁻¹ Y``) instead of caching
            X (:func:`circulant_reconstruct_`). Off by default.
        reconstruct_eps: reconstruct mode refuses a P whose min singular value is ≤ eps · max.

    Shapes: (..., in_features) -> (..., out_features).

    Example:
        >>> import torch
        >>> layer = BlockCirculantLinear(8, 4, block_size=4)
        >>> layer(torch.randn(2, 8)).shape
        torch.Size([2, 4])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        block_size: int,
        backend: str = "rdfft",
        bias: bool = False,
        dtype: torch.dtype | None = None,
        reconstruct: bool = False,
        reconstruct_eps: float = 1e-3,
    ) -> None:
        super().__init__()
        _check_block(in_features, out_features, block_size)
        _check_layer_backend(backend)
        if reconstruct and in_features != out_features:
            raise ValueError(
                f"reconstruct: needs a square layer, got in_features={in_features}, "
                f"out_features={out_features}"
            )
        if reconstruct and backend != "rdfft":
            raise ValueError(f"reconstruct: needs backend='rdfft', got backend={backend!r}")
        if not reconstruct_eps > 0:
            raise ValueError(f"reconstruct_eps: expected a positive float, got {reconstruct_eps!r}")
        self.reconstruct, self.reconstruct_eps = bool(reconstruct), float(reconstruct_eps)
        self.in_features, self.out_features, self.block_size = in_features, out_features, block_size
        self.backend = backend
        q_out, q_in = out_features // block_size, in_features // block_size
        bound = 1 / math.sqrt(in_features)  # like nn.Linear: each output sums d_in products
        self.c = nn.Parameter(
            torch.empty(q_out, q_in, block_size, dtype=dtype).uniform_(-bound, bound)
        )
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.reconstruct:
            return circulant_reconstruct_(x, self.c, self.bias, self.reconstruct_eps)
        y = block_circulant_matmul(x, self.c, self.backend)
        return y + self.bias if self.bias is not None else y

    def dense_weight(self) -> torch.Tensor:
        """The (out_features, in_features) dense weight."""
        return block_circulant_dense(self.c)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"block_size={self.block_size}, backend={self.backend!r}, bias={self.bias is not None}"
            + (", reconstruct=True" if self.reconstruct else "")
        )


class BCAdapter(nn.Module):
    """A block-circulant adapter on a frozen linear layer: ``y = W₀x + b + BC(c) x``.

    ``c`` starts at 0, so the adapted model equals the base model at init. BCA's stability
    heuristic divides the adapter's learning rate by p: :func:`bca_parameter_groups` applies
    ``lr_scale`` (default 1/p).

    Args:
        base: the frozen ``nn.Linear`` (its parameters get ``requires_grad=False``).
        block_size: p, a power of two dividing both of base's feature counts.
        backend: "rdfft", "rfft" or "dense".
        lr_scale: the adapter's learning-rate multiplier (default ``1 / block_size``).
        overwrite_input: rdfft only: once the frozen path has consumed x, transform x's own
            buffer in place so X is the only cached activation. Only where nothing reads x
            afterwards (not for q_proj in a Llama block, whose input k_proj and v_proj read too).
        spectrum_cache: rdfft only: a :class:`SpectrumCache` shared with the other adapters that
            read the same input (``apply_bca`` shares one per parent module), so their common X
            is transformed and saved once.
    """

    def __init__(
        self,
        base: nn.Linear,
        block_size: int,
        backend: str = "rdfft",
        lr_scale: float | None = None,
        overwrite_input: bool = False,
        spectrum_cache: SpectrumCache | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"base: expected an nn.Linear, got {type(base).__name__}")
        _check_block(base.in_features, base.out_features, block_size)
        _check_layer_backend(backend)
        if overwrite_input and backend != "rdfft":
            raise ValueError(
                f"overwrite_input: only the 'rdfft' backend can, got backend={backend!r}"
            )
        if spectrum_cache is not None and backend != "rdfft":
            raise ValueError(
                f"spectrum_cache: only the 'rdfft' backend can share spectra, got backend={backend!r}"
            )
        if spectrum_cache is not None and not isinstance(spectrum_cache, SpectrumCache):
            raise TypeError(
                f"spectrum_cache: expected a SpectrumCache, got {type(spectrum_cache).__name__}"
            )
        self.spectrum_cache = spectrum_cache
        self.base = base
        for prm in base.parameters():
            prm.requires_grad_(False)
        self.block_size, self.backend, self.overwrite_input = block_size, backend, overwrite_input
        self.lr_scale = 1.0 / block_size if lr_scale is None else float(lr_scale)
        q_out, q_in = base.out_features // block_size, base.in_features // block_size
        self.c = nn.Parameter(
            torch.zeros(q_out, q_in, block_size, dtype=base.weight.dtype, device=base.weight.device)
        )

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    @property
    def num_adapter_parameters(self) -> int:
        return self.c.numel()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)  # the frozen path consumes x first
        return y + block_circulant_matmul(
            x, self.c, self.backend, self.overwrite_input, self.spectrum_cache
        )

    @torch.no_grad()
    def merge(self) -> torch.Tensor:
        """The dense ΔW (out_features, in_features): ``base.weight + merge()`` is the adapted weight."""
        return block_circulant_dense(self.c.detach()).to(self.base.weight.dtype)

    @torch.no_grad()
    def merged_linear(self) -> nn.Linear:
        """A plain ``nn.Linear`` with ``W₀ + ΔW`` (and base's bias): the adapter folded away."""
        out = nn.Linear(
            self.in_features,
            self.out_features,
            bias=self.base.bias is not None,
            dtype=self.base.weight.dtype,
            device=self.base.weight.device,
        )
        out.weight.copy_(self.base.weight + self.merge())
        if self.base.bias is not None:
            out.bias.copy_(self.base.bias)
        return out

    def extra_repr(self) -> str:
        return f"block_size={self.block_size}, backend={self.backend!r}, lr_scale={self.lr_scale:g}"


def apply_bca(
    model: nn.Module,
    target_modules: Iterable[str] = ("q_proj", "v_proj"),
    block_size: int = 32,
    backend: str = "rdfft",
    lr_scale: float | None = None,
    freeze_base: bool = True,
    share_spectra: bool = True,
) -> nn.Module:
    """Swap every ``nn.Linear`` whose name ends in one of ``target_modules`` for a :class:`BCAdapter`.

    Works on any module tree (transformers models included: ``q_proj``/``v_proj`` for Llama,
    ``query``/``value`` for BERT/RoBERTa). Names match on their last component.

    Args:
        model: the model, modified in place.
        target_modules: last name components to adapt.
        block_size: p.
        backend: "rdfft", "rfft" or "dense".
        lr_scale: the adapters' learning-rate multiplier (default 1/p).
        freeze_base: set ``requires_grad=False`` on every parameter of the model first (so only
            the adapters train, as peft does).
        share_spectra: rdfft backend: the adapters under one parent module (q_proj and v_proj of
            one attention block read the same hidden state) share a :class:`SpectrumCache`, so
            their common input spectrum X is computed and saved for backward once.

    Returns:
        ``model``.

    Raises:
        ValueError: when no ``nn.Linear`` matches ``target_modules``.
    """
    if isinstance(target_modules, str):
        target_modules = (target_modules,)
    targets = tuple(target_modules)
    if not targets:
        raise ValueError("target_modules: expected at least one module name, got none")
    matches = [
        (name, mod)
        for name, mod in model.named_modules()
        if isinstance(mod, nn.Linear) and name.rsplit(".", 1)[-1] in targets
    ]
    if not matches:
        linear = sorted(
            {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)}
        )
        raise ValueError(
            f"target_modules: {targets} matched no nn.Linear of the model; its linear layers are "
            f"named {linear}"
        )
    if freeze_base:
        for prm in model.parameters():
            prm.requires_grad_(False)
    caches: dict[str, SpectrumCache] = {}
    for name, mod in matches:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        cache = None
        if share_spectra and backend == "rdfft":
            cache = caches.setdefault(parent_name, SpectrumCache())
        adapter = BCAdapter(
            mod, block_size, backend=backend, lr_scale=lr_scale, spectrum_cache=cache
        )
        setattr(parent, child, adapter)
    return model


def bca_parameter_groups(model: nn.Module, lr: float, weight_decay: float = 0.0) -> list[dict]:
    """Optimizer parameter groups: each adapter's ``c`` at ``lr · lr_scale``, the rest at ``lr``.

    Only parameters with ``requires_grad`` are included.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(BCAdapter(torch.nn.Linear(8, 8), 4), torch.nn.Linear(8, 2))
        >>> [(len(g["params"]), g["lr"]) for g in bca_parameter_groups(model, lr=1e-2)]
        [(2, 0.01), (1, 0.0025)]
    """
    adapters = [m for m in model.modules() if isinstance(m, BCAdapter)]
    adapter_ids = {id(m.c) for m in adapters}
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in adapter_ids]
    groups = [{"params": rest, "lr": lr, "weight_decay": weight_decay}] if rest else []
    by_scale: dict[float, list] = {}
    for m in adapters:
        if m.c.requires_grad:
            by_scale.setdefault(m.lr_scale, []).append(m.c)
    for scale, params in by_scale.items():
        groups.append({"params": params, "lr": lr * scale, "weight_decay": weight_decay})
    return groups
