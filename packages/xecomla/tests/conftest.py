"""Shared builders for the xecomla tests (fixtures: test modules are imported by path)."""

from __future__ import annotations

import pytest

from neurips25_core.bench import single_thread


def _llama_config(hidden=32, heads=4, kv_heads=2, head_dim=None, layers=2, **kwargs):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim or hidden // heads,
        num_hidden_layers=layers,
        intermediate_size=2 * hidden,
        vocab_size=32,
        max_position_embeddings=256,
        **kwargs,
    )


@pytest.fixture
def llama_config():
    """``llama_config(hidden=32, heads=4, kv_heads=2, head_dim=None, layers=2, **kw) -> LlamaConfig``."""
    return _llama_config


@pytest.fixture(autouse=True)
def _single_thread():
    """Tiny tensors on a shared 2-core machine: one intra-op thread, restored after."""
    with single_thread():
        yield
