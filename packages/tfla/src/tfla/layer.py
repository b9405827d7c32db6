"""``mLSTMLayer`` (the xLSTM mLSTM block's cell layer) and ``mLSTMLM``, a tiny language model.

The layer follows the xLSTM mLSTM layer: q/k/v projections, per-head scalar input and forget gates
from linear maps of the input, the mLSTM cell (:func:`tfla.mlstm`), a per-head RMS norm over Dv,
a sigmoid output gate and an output projection. Both modules carry the recurrent state, so
generation runs one token at a time and matches the full-sequence forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tfla.ops import mlstm

__all__ = ["mLSTMLM", "mLSTMLayer"]

State = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class _HeadRMSNorm(nn.Module):
    """RMS norm over the last dim of (B, S, H, D), with a weight per (head, feature)."""

    def __init__(self, num_heads: int, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_heads, dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(
            x.dtype
        ) * self.weight


class mLSTMLayer(nn.Module):
    """Multi-head mLSTM layer, (B, S, d_model) -> (B, S, d_model).

    Args:
        d_model: model width.
        num_heads: heads H.
        qk_head_dim: Dqk per head (default ``d_model // num_heads``).
        v_head_dim: Dv per head (default ``d_model // num_heads``).
        variant: ``"exp"`` (mLSTMexp) or ``"sig"`` (mLSTMsig).
        normalize: the cell's normaliser (``False`` only for ``"sig"``).
        chunk_size: chunk length of the kernel.
        backend: passed to :func:`tfla.mlstm`.
        forget_bias: forget-gate biases spread linearly over the heads in this range (positive, so
            the model starts by remembering, as in xLSTM).
        input_bias: initial input-gate bias (0 for both variants here).

    Example:
        >>> layer = mLSTMLayer(32, num_heads=2, chunk_size=16)
        >>> layer(torch.randn(2, 20, 32)).shape
        torch.Size([2, 20, 32])
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        qk_head_dim: int | None = None,
        v_head_dim: int | None = None,
        variant: str = "exp",
        normalize: bool = True,
        chunk_size: int = 64,
        backend: str = "auto",
        forget_bias: tuple[float, float] = (3.0, 6.0),
        input_bias: float = 0.0,
        eps: float = 1e-6,
    ):
        super().__init__()
        if d_model < 1 or num_heads < 1:
            raise ValueError(
                f"d_model/num_heads: expected positive ints, got {d_model}/{num_heads}"
            )
        if (qk_head_dim is None or v_head_dim is None) and d_model % num_heads:
            raise ValueError(
                f"num_heads: {num_heads} does not divide d_model={d_model}; pass qk_head_dim and v_head_dim"
            )
        self.d_model, self.num_heads = d_model, num_heads
        self.qk_head_dim = qk_head_dim or d_model // num_heads
        self.v_head_dim = v_head_dim or d_model // num_heads
        self.variant, self.normalize, self.chunk_size, self.backend, self.eps = (
            variant,
            normalize,
            chunk_size,
            backend,
            eps,
        )
        H, Dk, Dv = num_heads, self.qk_head_dim, self.v_head_dim
        self.q_proj = nn.Linear(d_model, H * Dk, bias=False)
        self.k_proj = nn.Linear(d_model, H * Dk, bias=False)
        self.v_proj = nn.Linear(d_model, H * Dv, bias=False)
        self.igate = nn.Linear(d_model, H)
        self.fgate = nn.Linear(d_model, H)
        self.ogate = nn.Linear(d_model, H * Dv)
        self.norm = _HeadRMSNorm(H, Dv)
        self.out_proj = nn.Linear(H * Dv, d_model, bias=False)
        with torch.no_grad():
            for gate in (self.igate, self.fgate):
                nn.init.zeros_(gate.weight)
            self.igate.bias.fill_(input_bias)
            self.fgate.bias.copy_(torch.linspace(forget_bias[0], forget_bias[1], H))

    def forward(self, x: torch.Tensor, state: State | None = None, return_state: bool = False):
        """Args: x (B, S, d_model); state ``(C (B,H,Dqk,Dv), n (B,H,Dqk), m (B,H,1))`` or None.

        Returns:
            y (B, S, d_model); with ``return_state`` also the state after the last step.
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x: expected shape (B, S, {self.d_model}), got {tuple(x.shape)}")
        B, S, _ = x.shape
        H, Dk, Dv = self.num_heads, self.qk_head_dim, self.v_head_dim
        q = self.q_proj(x).view(B, S, H, Dk).transpose(1, 2)
        k = self.k_proj(x).view(B, S, H, Dk).transpose(1, 2)
        v = self.v_proj(x).view(B, S, H, Dv).transpose(1, 2)
        i = self.igate(x).transpose(1, 2)
        f = self.fgate(x).transpose(1, 2)
        c0, n0, m0 = state if state is not None else (None, None, None)
        out = mlstm(
            q, k, v, i, f, variant=self.variant, normalize=self.normalize, chunk_size=self.chunk_size,
            c0=c0, n0=n0, m0=m0, return_last_state=return_state, eps=self.eps, backend=self.backend,
        )  # fmt: skip
        h, new_state = out if return_state else (out, None)
        h = self.norm(h.transpose(1, 2))  # (B, S, H, Dv)
        y = self.out_proj(torch.sigmoid(self.ogate(x)) * h.reshape(B, S, H * Dv))
        return (y, new_state) if return_state else y


class _Block(nn.Module):
    def __init__(self, d_model: int, ff_dim: int, **layer_kwargs):
        super().__init__()
        self.norm1 = nn.RMSNorm(d_model, eps=1e-5)
        self.mlstm = mLSTMLayer(d_model, **layer_kwargs)
        self.norm2 = nn.RMSNorm(d_model, eps=1e-5)
        self.up = nn.Linear(d_model, 2 * ff_dim, bias=False)
        self.down = nn.Linear(ff_dim, d_model, bias=False)

    def forward(self, x, state=None, return_state=False):
        out = self.mlstm(self.norm1(x), state=state, return_state=return_state)
        y, new_state = out if return_state else (out, None)
        x = x + y
        a, b = self.up(self.norm2(x)).chunk(2, dim=-1)
        x = x + self.down(F.silu(a) * b)
        return x, new_state


class mLSTMLM(nn.Module):
    """A tiny mLSTM language model: embedding, pre-norm blocks of mLSTMLayer + SwiGLU MLP, tied head.

    Args:
        vocab_size: vocabulary (256 for bytes).
        d_model: width.
        num_layers: blocks.
        num_heads: heads per mLSTM layer.
        ff_dim: SwiGLU hidden width (default ``round(8/3·d_model)`` to a multiple of 32).
        **layer_kwargs: passed to :class:`mLSTMLayer` (variant, normalize, chunk_size, backend, ...).

    Example:
        >>> lm = mLSTMLM(d_model=32, num_layers=2, num_heads=2, chunk_size=16)
        >>> lm(torch.randint(0, 256, (2, 10))).shape
        torch.Size([2, 10, 256])
    """

    def __init__(
        self,
        vocab_size: int = 256,
        d_model: int = 128,
        num_layers: int = 4,
        num_heads: int = 4,
        ff_dim: int | None = None,
        **layer_kwargs,
    ):
        super().__init__()
        ff_dim = ff_dim or int(-(-8 * d_model // 3 // 32) * 32)
        self.embed = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(
            _Block(d_model, ff_dim, num_heads=num_heads, **layer_kwargs) for _ in range(num_layers)
        )
        self.norm = nn.RMSNorm(d_model, eps=1e-5)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(
        self, input_ids: torch.Tensor, states: list[State] | None = None, return_state: bool = False
    ):
        """Args: input_ids (B, S) int64; per-layer states or None.

        Returns:
            logits (B, S, vocab); with ``return_state`` also the list of per-layer states.
        """
        if not isinstance(input_ids, torch.Tensor) or input_ids.dtype not in (
            torch.int32,
            torch.int64,
        ):
            raise TypeError(
                "input_ids: expected an int32/int64 tensor, got "
                f"{getattr(input_ids, 'dtype', type(input_ids).__name__)}"
            )
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids: expected shape (B, S), got {tuple(input_ids.shape)}")
        vocab = self.embed.num_embeddings
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab):
            raise ValueError(
                f"input_ids: expected ids in [0, {vocab}) (vocab_size={vocab}), got values in "
                f"[{int(input_ids.min())}, {int(input_ids.max())}]"
            )
        if states is not None and len(states) != len(self.blocks):
            raise ValueError(
                f"states: expected one state per layer ({len(self.blocks)}), got {len(states)}"
            )
        x = self.embed(input_ids)
        new_states = []
        for j, block in enumerate(self.blocks):
            x, st = block(x, state=None if states is None else states[j], return_state=return_state)
            new_states.append(st)
        logits = F.linear(self.norm(x), self.embed.weight)
        return (logits, new_states) if return_state else logits

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Greedy (``temperature=0``) or sampled continuation, one token per step with the state.

        Args:
            input_ids: (B, S) prompt.
            max_new_tokens: tokens to append.

        Returns:
            (B, S + max_new_tokens) int64.
        """
        logits, states = self(input_ids, return_state=True)
        out = [input_ids]
        for _ in range(max_new_tokens):
            last = logits[:, -1].float()
            if temperature > 0:
                nxt = torch.multinomial(
                    torch.softmax(last / temperature, -1), 1, generator=generator
                )
            else:
                nxt = last.argmax(-1, keepdim=True)
            out.append(nxt)
            logits, states = self(nxt, states=states, return_state=True)
        return torch.cat(out, dim=1)
