"""Shared settings for the ptmoe tests."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from neurips25_core.bench import single_thread


@pytest.fixture(autouse=True)
def _single_thread():
    """Tiny tensors: one intra-op thread on the shared 2-core machine (restored after)."""
    with single_thread():
        yield


VOCAB = 48


def _tiny_llama(hidden=32, seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return LlamaForCausalLM(config).eval()


def _make_batch(seed=0, batch=3, length=9):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, length), generator=g)
    labels = ids.clone()
    labels[:, :5] = -100  # the first 5 tokens are the source, the rest the answer
    return ids, labels


@pytest.fixture
def tiny_llama():
    """``tiny_llama(hidden=32, seed=0)``: a 2-layer LlamaForCausalLM from a config, vocabulary 48."""
    return _tiny_llama


@pytest.fixture
def make_batch():
    """``make_batch(seed=0, batch=3, length=9) -> (ids, labels)``: 5 source tokens, then answers."""
    return _make_batch
