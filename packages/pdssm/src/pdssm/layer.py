"""PD-SSM layer and model (``torch.nn``), with the official variants and the baselines.

One layer maps (B, L, E) → (B, L, E):

* ``s(u) = softmax(S u)`` over a dictionary of K real N×N matrices, ``M(u) = Σ_k s_k M_k``;
  ``P`` is the column-wise hardmax of ``M`` with the straight-through gradient of the column
  softmax, ``P = (hard − soft).detach() + soft``;
* ``|D| = σ(MLP(u))`` and ``arg D = 2π·σ(MLP(u))`` (GELU MLPs with hidden width 2N);
* ``x_t = P_t D_t x_{t-1} + B u_t`` with complex ``B`` and ``x_0 = e_0``;
* ``y = LayerNorm(Linear([Re x; Im x]) + d ⊙ u)`` with dropout before the readout.

``transition="diagonal"`` is the complex-diagonal SSM (``P = I``) and ``transition="dense"`` a
dense-transition SSM ``A_t = softmax_col(M(u_t))·D_t`` (column-stochastic times a contraction, so
still BIBO-stable): both are baselines with the same interface.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .ops import BACKENDS, ORIENTATIONS, check_backend, pd_scan, scan_checked
from .reference import dense_scan

__all__ = ["PDSSM", "PDSSMLayer"]

TRANSITIONS = ("pd", "diagonal", "dense")
D_GENERATORS = ("mlp", "linear")
INITIAL_STATES = ("e0", "zero")
READOUTS = ("linear", "c_matrix")


def _choice(name: str, value: str, options: tuple[str, ...]) -> str:
    if value not in options:
        raise ValueError(f"{name}: expected one of {options}, got {value!r}")
    return value


def _positive_int(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name}: expected >= 1, got {value}")
    return value


class PDSSMLayer(nn.Module):
    """One PD-SSM layer (post-LayerNorm block of the official PyTorch code, no residual).

    Args:
        d_model: embedding width E of inputs and outputs.
        state_size: N, the number of complex states.
        dictionary_size: K, the number of dictionary matrices (8 in the official PyTorch code,
            6 in the JAX code).
        orientation: ``"column"`` (``A = P·D``, the paper) or ``"row"`` (``A = D·P``, the official
            PyTorch numerics, which can only emulate permutation automata with one-hot states).
        transition: ``"pd"`` (PD-SSM), ``"diagonal"`` (complex-diagonal baseline, P = I) or
            ``"dense"`` (dense-transition baseline, softmax-normalised M times D).
        d_generator: ``"mlp"`` (the paper's 2-layer GELU MLPs, hidden width ``hidden_multiple·N``)
            or ``"linear"`` (the JAX code: one Linear + sigmoid for magnitude and for phase).
        x0: ``"e0"`` (official PyTorch; needed for exact FSA emulation) or ``"zero"`` (JAX).
        readout: ``"linear"`` (``Linear(2N, E)`` on ``[Re x; Im x]``) or ``"c_matrix"`` (JAX:
            ``Re(C x)`` with complex ``C`` of shape (E, N)).
        dropout: dropout before the readout (0.01 officially).
        hidden_multiple: the D-generator hidden width in multiples of N.
        backend: the :func:`pdssm.pd_scan` backend for ``"pd"``/``"diagonal"``.

    Shapes:
        input (B, L, E) real → output (B, L, E) real, in the dtype of the layer's parameters
        (float32 by default, float64 after ``layer.double()``); any other input dtype, or
        float16/bfloat16 parameters, is refused with a ``TypeError`` (the complex scan has no
        half-precision path).

    Example:
        >>> import torch
        >>> from pdssm import PDSSMLayer
        >>> layer = PDSSMLayer(d_model=16, state_size=8)
        >>> layer(torch.randn(2, 10, 16)).shape
        torch.Size([2, 10, 16])
    """

    def __init__(
        self,
        d_model: int,
        state_size: int,
        dictionary_size: int = 8,
        orientation: str = "column",
        transition: str = "pd",
        d_generator: str = "mlp",
        x0: str = "e0",
        readout: str = "linear",
        dropout: float = 0.01,
        hidden_multiple: int = 2,
        backend: str = "auto",
    ) -> None:
        super().__init__()
        self.d_model = _positive_int("d_model", d_model)
        self.state_size = n = _positive_int("state_size", state_size)
        self.dictionary_size = _positive_int("dictionary_size", dictionary_size)
        self.orientation = _choice("orientation", orientation, ORIENTATIONS)
        self.transition = _choice("transition", transition, TRANSITIONS)
        self.d_generator = _choice("d_generator", d_generator, D_GENERATORS)
        self.x0 = _choice("x0", x0, INITIAL_STATES)
        self.readout_kind = _choice("readout", readout, READOUTS)
        self.backend = _choice("backend", backend, BACKENDS)
        _positive_int("hidden_multiple", hidden_multiple)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout: expected a probability in [0, 1), got {dropout}")

        e = d_model
        if transition != "diagonal":
            self.selector = nn.Linear(e, dictionary_size, bias=False)
            self.dictionary = nn.Parameter(torch.randn(dictionary_size, n, n) / math.sqrt(n))

        def generator() -> nn.Module:
            if d_generator == "linear":
                return nn.Sequential(nn.Linear(e, n), nn.Sigmoid())
            hidden = hidden_multiple * n
            return nn.Sequential(
                nn.Linear(e, hidden), nn.GELU(), nn.Linear(hidden, n), nn.Sigmoid()
            )

        self.magnitude = generator()
        self.phase = generator()
        self.B_re = nn.Parameter(torch.randn(n, e) / math.sqrt(2 * n))
        self.B_im = nn.Parameter(torch.randn(n, e) / math.sqrt(2 * n))
        self.skip = nn.Parameter(torch.randn(e) / math.sqrt(e))
        self.dropout = nn.Dropout(dropout)
        if readout == "linear":
            self.readout = nn.Linear(2 * n, e)
        else:
            self.C_re = nn.Parameter(torch.randn(e, n) / math.sqrt(n))
            self.C_im = nn.Parameter(torch.randn(e, n) / math.sqrt(n))
        self.norm = nn.LayerNorm(e)

    # -- pieces, exposed for tests and for inspecting a trained model ---------------------------

    def diagonal(self, u: torch.Tensor) -> torch.Tensor:
        """``D_t`` (B, L, N) complex with ``|D| ∈ (0, 1)`` from inputs (B, L, E)."""
        return torch.polar(self.magnitude(u), 2 * math.pi * self.phase(u))

    def mixing_matrix(self, u: torch.Tensor) -> torch.Tensor:
        """``M(u) = Σ_k softmax(S u)_k M_k``, (B, L, N, N) real."""
        weights = torch.softmax(self.selector(u), dim=-1)
        return torch.einsum("blk,kmn->blmn", weights, self.dictionary)

    def one_hot_factor(self, u: torch.Tensor) -> torch.Tensor:
        """Straight-through ``P`` (B, L, N, N): hardmax value, column-softmax gradient."""
        axis = -2 if self.orientation == "column" else -1
        soft = torch.softmax(self.mixing_matrix(u), dim=axis)
        index = soft.argmax(dim=axis, keepdim=True)
        hard = torch.zeros_like(soft).scatter_(axis, index, 1.0)
        return (hard - soft).detach() + soft

    def _indices_and_soft(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Hardmax indices and the soft matrix, with the softmax axis contiguous in memory.

        A reduction over a strided axis of a (B, L, N, N) tensor is several times slower than
        over the contiguous one, so the column orientation builds ``Mᵀ`` and returns a transposed
        view. ``argmax M = argmax softmax(M)``, so the indices come from ``M`` directly.
        """
        weights = torch.softmax(self.selector(u), dim=-1)
        if self.orientation == "column":
            logits = torch.einsum("blk,kmn->blnm", weights, self.dictionary)
            return logits.argmax(-1), torch.softmax(logits, dim=-1).transpose(-1, -2)
        logits = torch.einsum("blk,kmn->blmn", weights, self.dictionary)
        return logits.argmax(-1), torch.softmax(logits, dim=-1)

    def states(self, u: torch.Tensor) -> torch.Tensor:
        """The complex states ``x_1..x_L`` (B, L, N) for inputs (B, L, E)."""
        batch, length, _ = u.shape
        n = self.state_size
        cdtype = torch.complex128 if u.dtype == torch.float64 else torch.complex64
        d = self.diagonal(u)
        b_matrix = torch.complex(self.B_re, self.B_im).to(cdtype)
        b = torch.einsum("ne,ble->bln", b_matrix, u.to(cdtype))
        x0 = torch.zeros(batch, n, dtype=cdtype, device=u.device)
        if self.x0 == "e0":
            x0[:, 0] = 1
        if self.transition == "pd":
            indices, soft = self._indices_and_soft(u)
            check_backend(d, self.backend)
            return scan_checked(indices, soft, d, b, x0, self.orientation, self.backend)
        if self.transition == "diagonal":
            identity = torch.arange(n, device=u.device).expand(batch, length, n)
            return pd_scan(identity, d, b, x0, self.orientation, self.backend)
        axis = -2 if self.orientation == "column" else -1
        mixing = torch.softmax(self.mixing_matrix(u), dim=axis).to(cdtype)
        a = mixing * (d.unsqueeze(-2) if self.orientation == "column" else d.unsqueeze(-1))
        return dense_scan(a, b, x0)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """Apply the layer.

        Args:
            u: real (B, L, E) inputs.

        Returns:
            real (B, L, E) outputs.
        """
        if not isinstance(u, torch.Tensor) or not u.is_floating_point():
            raise TypeError(
                f"u: expected a real floating tensor, got {getattr(u, 'dtype', type(u).__name__)}"
            )
        if u.dim() != 3 or u.shape[-1] != self.d_model:
            raise ValueError(f"u: expected shape (B, L, {self.d_model}), got {tuple(u.shape)}")
        pdtype = self.B_re.dtype
        if pdtype not in (torch.float32, torch.float64):
            raise TypeError(
                f"PDSSMLayer: the layer computes in float32 or float64 (complex64/complex128 "
                f"states), but its parameters are {pdtype}; use layer.float() or layer.double()"
            )
        if u.dtype != pdtype:
            raise TypeError(
                f"u: expected the dtype of the layer's parameters ({pdtype}), got {u.dtype}; "
                f"cast the input (u.to({pdtype})) or the layer (layer.to({u.dtype}))"
            )
        x = self.states(u)
        features = self.dropout(torch.cat([x.real, x.imag], dim=-1)).to(u.dtype)
        if self.readout_kind == "linear":
            y = self.readout(features)
        else:
            # Re(C x) = C_re·Re x − C_im·Im x.
            y = features @ torch.cat([self.C_re, -self.C_im], dim=1).T
        return self.norm(y + self.skip * u)


class PDSSM(nn.Module):
    """Token classifier: embedding → stacked :class:`PDSSMLayer` → linear head.

    Args:
        vocab_size: number of input tokens.
        num_classes: number of output classes.
        d_model: embedding width E (official: 128).
        state_size: N (official: 128; the official PyTorch readout forces N = E, ours does not).
        num_layers: number of layers (official: 2).
        output: ``"all"`` (per-token logits (B, L, C)) or ``"last"`` (final-token logits (B, C)).
        **layer_kwargs: passed to every :class:`PDSSMLayer` (``transition``, ``orientation``, ...).

    Example:
        >>> import torch
        >>> from pdssm import PDSSM
        >>> model = PDSSM(vocab_size=3, num_classes=6, d_model=8, state_size=8, num_layers=1)
        >>> model(torch.randint(0, 3, (4, 12))).shape
        torch.Size([4, 12, 6])
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        d_model: int = 128,
        state_size: int = 128,
        num_layers: int = 2,
        output: str = "all",
        **layer_kwargs,
    ) -> None:
        super().__init__()
        _positive_int("vocab_size", vocab_size)
        _positive_int("num_classes", num_classes)
        _positive_int("num_layers", num_layers)
        self.output = _choice("output", output, ("all", "last"))
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(
            PDSSMLayer(d_model, state_size, **layer_kwargs) for _ in range(num_layers)
        )
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits for int64 tokens (B, L): (B, L, C) or, with ``output="last"``, (B, C)."""
        if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int32, torch.int64):
            raise TypeError(
                f"tokens: expected an int32/int64 tensor, got {getattr(tokens, 'dtype', type(tokens).__name__)}"
            )
        if tokens.dim() != 2:
            raise ValueError(f"tokens: expected shape (B, L), got {tuple(tokens.shape)}")
        vocab = self.embedding.num_embeddings
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab):
            raise ValueError(
                f"tokens: expected ids in [0, {vocab}) (vocab_size={vocab}), got values in "
                f"[{int(tokens.min())}, {int(tokens.max())}]"
            )
        h = self.embedding(tokens)
        for layer in self.layers:
            h = layer(h)
        logits = self.head(h)
        return logits if self.output == "all" else logits[:, -1]
