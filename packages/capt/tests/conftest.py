"""Shared settings for the capt tests: one thread, and tiny causal layers for the math tests."""

from __future__ import annotations

import pytest
import torch

from neurips25_core.bench import single_thread
from neurips25_core.testing import randn


@pytest.fixture(autouse=True)
def _single_thread():
    """Tiny tensors: one intra-op thread on the shared 2-core machine (restored after)."""
    with single_thread():
        yield


class ToyCausalLayer:
    """``h + MLP(h + CausalAttn(h))``, one head, keys masked by padding; any float dtype.

    No position encoding, so a shift of the real tokens (left vs right padding) changes nothing.
    Weights are float64 and cast to the input dtype, so the same layer serves fp64 and fp32.
    """

    def __init__(self, d: int, seed: int):
        self.wq, self.wk, self.wv = (
            randn(d, d, seed=seed + i, dtype=torch.float64) / d**0.5 for i in range(3)
        )
        self.w1 = randn(d, 2 * d, seed=seed + 3, dtype=torch.float64) / d**0.5
        self.w2 = randn(2 * d, d, seed=seed + 4, dtype=torch.float64) / (2 * d) ** 0.5

    def __call__(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        w = [x.to(h.dtype) for x in (self.wq, self.wk, self.wv, self.w1, self.w2)]
        q, k, v = h @ w[0], h @ w[1], h @ w[2]
        scores = q @ k.transpose(-1, -2) / h.shape[-1] ** 0.5
        t = h.shape[1]
        allowed = torch.ones(t, t, dtype=torch.bool).tril()[None] & mask.bool()[:, None, :]
        scores = scores.masked_fill(~allowed, float("-inf"))
        probs = torch.softmax(scores, -1).nan_to_num(0.0)  # a padded query with no key: zeros
        h = h + probs @ v
        return h + torch.tanh(h @ w[3]) @ w[4]


class ToyNorm:
    """RMSNorm with a fixed random gain (the layer norm of ``instance_source="hidden"``)."""

    def __init__(self, d: int, seed: int):
        self.g = 1 + 0.1 * randn(d, seed=seed, dtype=torch.float64)

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.g.to(h.dtype)


@pytest.fixture
def toy_stack():
    """``toy_stack(n_layers, d) -> (layers, norms)``: deterministic toy causal layers and norms."""

    def build(n_layers: int, d: int):
        layers = [ToyCausalLayer(d, seed=10 * i) for i in range(n_layers)]
        norms = [ToyNorm(d, seed=10 * i + 7) for i in range(n_layers)]
        return layers, norms

    return build


def _make_masks(batch: int, length: int, padding: str, seed: int = 0):
    """``(attention_mask, instance_mask)`` int64 ``[B, T]``: ragged lengths, source = first ~60 %."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(1, length // 2), length + 1, (batch,), generator=g)
    lengths[0] = length
    attn = torch.zeros(batch, length, dtype=torch.long)
    inst = torch.zeros(batch, length, dtype=torch.long)
    for b, n in enumerate(lengths.tolist()):
        n_src = max(1, (3 * n) // 5)
        start = length - n if padding == "left" else 0
        attn[b, start : start + n] = 1
        inst[b, start : start + n_src] = 1
    return attn, inst


@pytest.fixture
def make_masks():
    """``make_masks(batch, length, padding, seed=0) -> (attention_mask, instance_mask)``."""
    return _make_masks


VOCAB = 48


def _tiny_llama(hidden=32, layers=3, seed=0, dtype=torch.float32, model_type="llama"):
    """A tiny decoder of ``model_type`` in (llama, qwen2, mistral) from a config; Qwen2's q/k/v
    biases (zero at init) are drawn so that they matter."""
    import transformers

    cls = {"llama": "Llama", "qwen2": "Qwen2", "mistral": "Mistral"}[model_type]
    torch.manual_seed(seed)
    config = getattr(transformers, f"{cls}Config")(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
    )
    model = getattr(transformers, f"{cls}ForCausalLM")(config).to(dtype).eval()
    if model_type == "qwen2":
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (
                    layer.self_attn.q_proj,
                    layer.self_attn.k_proj,
                    layer.self_attn.v_proj,
                ):
                    proj.bias.normal_(0, 0.5)
    return model


@pytest.fixture
def tiny_llama():
    """``tiny_llama(hidden=32, layers=3, seed=0, dtype=float32, model_type="llama")``: a tiny decoder."""
    return _tiny_llama


def _tiny_t5(hidden=32, layers=3, seed=0, dtype=torch.float32, encoder_only=False):
    from transformers import T5Config, T5EncoderModel, T5ForConditionalGeneration

    torch.manual_seed(seed)
    config = T5Config(
        vocab_size=VOCAB,
        d_model=hidden,
        d_kv=8,
        d_ff=2 * hidden,
        num_layers=layers,
        num_decoder_layers=1,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        dropout_rate=0.0,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        attn_implementation="eager",
    )
    cls = T5EncoderModel if encoder_only else T5ForConditionalGeneration
    return cls(config).to(dtype).eval()


@pytest.fixture
def tiny_t5():
    """``tiny_t5(hidden=32, layers=3, seed=0, dtype=float32, encoder_only=False)``: a T5 from a config."""
    return _tiny_t5
