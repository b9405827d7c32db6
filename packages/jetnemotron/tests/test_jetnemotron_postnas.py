"""PostNAS: supernet = teacher at all-full, frozen parameters, search, convert, DDP."""

import math

import pytest
import torch
from jetnemotron.layers import JetBlock
from jetnemotron.postnas import (
    Supernet,
    beam_search,
    convert,
    exhaustive_search,
    greedy_generate,
    hybrid_cache,
    lm_objective,
    train_supernet,
)

from neurips25_core.distributed import run_distributed
from neurips25_core.testing import assert_close


def _teacher(layers=4, dtype=torch.float32, seed=0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=48,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        attn_implementation="sdpa",
    )
    return Qwen2ForCausalLM(cfg).to(dtype).eval()


def _factory(config, i):
    return JetBlock(config.hidden_size, 2, 8, 16, generator_reduction=4, layer_idx=i, chunk_size=8)


def test_all_full_layout_reproduces_teacher_logits_exactly():
    teacher = _teacher()
    net = Supernet(teacher, _factory).set_layout([1, 1, 1, 1])
    ids = torch.randint(0, 48, (2, 12))
    assert torch.equal(net(input_ids=ids).logits, teacher(input_ids=ids).logits)


def test_training_moves_only_the_blocks_and_frozen_params_stay_bit_identical():
    teacher = _teacher()
    net = Supernet(teacher, _factory)
    frozen = {n: p.detach().clone() for n, p in net.named_parameters() if not p.requires_grad}
    blocks = {n: p.detach().clone() for n, p in net.named_parameters() if p.requires_grad}
    assert frozen and blocks and all(".linear." in n for n in blocks)
    ids = torch.randint(0, 48, (3, 2, 12))
    losses = train_supernet(net, teacher, ids, steps=3, lr=1e-2, progress=False)
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    for n, p in net.named_parameters():
        if n in frozen:
            assert torch.equal(p, frozen[n]), n
            assert p.grad is None, n
    assert any(not torch.equal(p, blocks[n]) for n, p in net.named_parameters() if n in blocks)
    assert net.layout == (1, 1, 1, 1)  # the layout is restored after training


def test_beam_search_with_wide_beam_equals_exhaustive():
    teacher = _teacher()
    net = Supernet(teacher, _factory)
    ids = torch.randint(0, 48, (2, 16))
    objective = lm_objective(ids)
    for k in (1, 2):
        # beam_width >= max_r<=k C(4, r) = 6: nothing is pruned
        layout, table = beam_search(net, k, beam_width=math.comb(4, k), objective=objective)
        best, full_table = exhaustive_search(net, k, objective=objective)
        assert layout == best and sum(layout) == k
        assert len(full_table) == math.comb(4, k)
        for key, score in full_table.items():
            assert table[key] == score
    # a narrow beam scores fewer sets
    _, narrow = beam_search(net, 2, beam_width=1, objective=objective)
    assert len(narrow) == 4 + 3


def test_convert_decodes_like_its_full_forward():
    teacher = _teacher(dtype=torch.float64)
    net = Supernet(teacher, _factory).double()
    hyb = convert(teacher, [0, 1, 0, "swa"], blocks_from=net, sliding_window=5)
    ids = torch.randint(0, 48, (2, 11))
    full = hyb(input_ids=ids).logits
    cache = hybrid_cache(hyb)
    parts = [
        hyb(input_ids=ids[:, a:b], cache=cache, use_cache=True).logits
        for a, b in ((0, 7), (7, 9), (9, 10), (10, 11))
    ]
    assert_close(torch.cat(parts, 1), full, rtol=1e-12)
    tokens = greedy_generate(hyb, ids[:, :4], 3)
    assert tokens.shape == (2, 3)
    # a left-padded batch gives the same logits at the valid positions
    pad = torch.cat([torch.zeros(2, 3, dtype=torch.long), ids], 1)
    mask = torch.cat([torch.zeros(2, 3, dtype=torch.long), torch.ones_like(ids)], 1)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    padded = hyb(input_ids=pad, attention_mask=mask, position_ids=pos).logits[:, 3:]
    assert_close(padded, full, rtol=1e-12)


def test_postnas_bad_input():
    teacher = _teacher()
    net = Supernet(teacher, _factory)
    obj = lm_objective(torch.randint(0, 48, (1, 8)))
    with pytest.raises(ValueError, match="k:"):
        beam_search(net, 5, objective=obj)
    with pytest.raises(ValueError, match="k:"):
        exhaustive_search(net, 5, objective=obj)
    with pytest.raises(ValueError, match="beam_width"):
        beam_search(net, 1, beam_width=0, objective=obj)
    with pytest.raises(ValueError, match="mask"):
        net.set_layout([1, 0, 1])
    with pytest.raises(ValueError, match="mask"):
        net.set_layout([1, 0, 2, 1])
    with pytest.raises(ValueError, match="p_full"):
        train_supernet(net, teacher, torch.zeros(1, 1, 4, dtype=torch.long), steps=1, p_full=1.5)
    with pytest.raises(ValueError, match="steps"):
        train_supernet(net, teacher, torch.zeros(1, 1, 4, dtype=torch.long), steps=0)
    with pytest.raises(TypeError, match="model"):
        Supernet(torch.nn.Linear(2, 2), _factory)
    with pytest.raises(ValueError, match="layout"):
        convert(teacher, [1, 0, 1], blocks_from=net)
    with pytest.raises(ValueError, match="blocks_from"):
        convert(teacher, [1, 0, 1, 1])
    with pytest.raises(ValueError, match="blocks_from"):
        convert(_teacher(layers=3), [1, 0, 1], blocks_from=net)


def _ddp_train(rank, world_size, ids):
    # float64: in float32 the two runs differ by ~2e-6 after 5 AdamW steps (the all-reduce sums
    # in another order, and Adam's normalisation magnifies round-off in near-zero gradients).
    teacher = _teacher(seed=3, dtype=torch.float64)
    net = Supernet(teacher, _factory)
    shard = ids.shape[1] // world_size
    mine = ids[:, rank * shard : (rank + 1) * shard]
    train_supernet(net, teacher, mine, steps=5, lr=1e-2, seed=11, progress=False)
    return [p.detach().clone() for p in net.block_parameters()]


def test_two_process_ddp_equals_one_process():
    ids = torch.randint(0, 48, (5, 4, 12), generator=torch.Generator().manual_seed(0))
    one = run_distributed(_ddp_train, world_size=1, args=(ids,))[0]
    two = run_distributed(_ddp_train, world_size=2, args=(ids,))
    for a, b, c in zip(one, two[0], two[1], strict=True):
        assert torch.equal(b, c)  # the ranks agree exactly
        assert_close(b, a, rtol=1e-10)
