"""Tiny transformers models built from configs (no weights downloaded), one intra-op thread.

One thread: on the shared two-core machine two OpenMP threads spin-wait for each other on tiny
tensors (the same fixture as jetnemotron's tests).
"""

import pytest
import torch

from neurips25_core.bench import single_thread


@pytest.fixture(autouse=True)
def _one_thread():
    with single_thread():
        yield


def _nemotron_h(seed=0, dtype=torch.float64, pattern="M-*M*-", **overrides):
    from transformers import NemotronHConfig, NemotronHForCausalLM

    kw = dict(
        vocab_size=64,
        hidden_size=16,
        hybrid_override_pattern=pattern,
        mamba_num_heads=8,
        mamba_head_dim=4,
        n_groups=2,
        ssm_state_size=4,
        conv_kernel=4,
        chunk_size=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=4,
        intermediate_size=24,
        tie_word_embeddings=False,
    )
    kw.update(overrides)
    torch.manual_seed(seed)
    model = NemotronHForCausalLM(NemotronHConfig(**kw)).to(dtype).eval()
    # non-trivial A, D, dt_bias and norm weights, so that a wrong slice shows
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.3 * torch.rand_like(p))
    return model


def _llama(seed=0, dtype=torch.float64, qwen=False, **overrides):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    kw = dict(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    kw.update(overrides)
    torch.manual_seed(seed)
    cls, cfg = (Qwen2ForCausalLM, Qwen2Config) if qwen else (LlamaForCausalLM, LlamaConfig)
    model = cls(cfg(**kw)).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.3 * torch.rand_like(p))
    return model


def _mamba2(seed=0, dtype=torch.float64, **overrides):
    from transformers import Mamba2Config, Mamba2ForCausalLM

    kw = dict(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=2,
        num_heads=8,
        head_dim=4,
        expand=2,
        n_groups=2,
        state_size=4,
        conv_kernel=4,
        chunk_size=8,
        tie_word_embeddings=False,
    )
    kw.update(overrides)
    torch.manual_seed(seed)
    model = Mamba2ForCausalLM(Mamba2Config(**kw)).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.3 * torch.rand_like(p))
    return model


@pytest.fixture
def make_nemotron_h():
    return _nemotron_h


@pytest.fixture
def fp64_norms(monkeypatch):
    """Make NemotronH's RMSNorms keep float64 inputs in float64.

    transformers' NemotronHRMSNorm and NemotronHRMSNormGated compute in float32 whatever the model
    dtype, so a float64 model is only float32-exact: reordering channels moves its logits by ~1e-7.
    The same math in the input's dtype makes the 1e-12 (float64) checks of slicing meaningful.
    """
    from transformers.models.nemotron_h import modeling_nemotron_h as nh

    def norm(self, hidden_states):
        dt = torch.promote_types(hidden_states.dtype, torch.float32)
        h = hidden_states.to(dt)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return (self.weight.to(dt) * h).to(hidden_states.dtype)

    def gated(self, hidden_states, gate=None):
        dt = torch.promote_types(hidden_states.dtype, torch.float32)
        h = hidden_states.to(dt)
        if gate is not None:
            h = h * torch.nn.functional.silu(gate.to(dt))
        *prefix, last = h.shape
        g = h.view(*prefix, last // self.group_size, self.group_size)
        g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * g.view(*prefix, last).to(hidden_states.dtype)

    monkeypatch.setattr(nh.NemotronHRMSNorm, "forward", norm)
    monkeypatch.setattr(nh.NemotronHRMSNormGated, "forward", gated)


@pytest.fixture
def make_llama():
    return _llama


@pytest.fixture
def make_mamba2():
    return _mamba2
