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
def make_llama():
    return _llama


@pytest.fixture
def make_mamba2():
    return _mamba2
