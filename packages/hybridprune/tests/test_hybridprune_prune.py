"""prune / apply_plan / count_params on a tiny NemotronH (float64)."""

import pytest
import torch
from hybridprune import PruneTarget, collect_importance, count_params, prune
from hybridprune.prune import Plan, apply_plan, make_plan

from neurips25_core.testing import assert_close

SMALL = PruneTarget(
    hidden_size=12,
    intermediate_size=16,
    num_attention_heads=2,
    mamba_num_heads=4,
    mamba_head_dim=3,
    num_layers=5,
)


def _ids(seed=0, shape=(2, 9)):
    # ids 0-2 are the config's pad/bos/eos: generate would read a 0 as padding
    return torch.randint(3, 64, shape, generator=torch.Generator().manual_seed(seed))


def _logits(model, ids):
    """float64 logits (NemotronHForCausalLM casts its logits to float32, so they are recomputed here)."""
    with torch.no_grad():
        h = model.model(input_ids=ids, use_cache=False).last_hidden_state
        return h @ model.lm_head.weight.T


def _n(model):
    return sum(p.numel() for p in model.parameters())


def _identity_plan(cfg):
    layers = list(range(len(cfg.layers_block_type)))
    plan = Plan(hidden=torch.arange(cfg.hidden_size), layers=layers)
    for i, t in enumerate(cfg.layers_block_type):
        if t == "mlp":
            plan.ffn[i] = torch.arange(cfg.intermediate_size)
        elif t == "full_attention":
            plan.attn_heads[i] = torch.arange(cfg.num_attention_heads)
        else:
            plan.mamba[i] = (torch.arange(cfg.mamba_num_heads), torch.arange(cfg.mamba_head_dim))
    return plan


def test_keeping_everything_leaves_logits_unchanged(make_nemotron_h, fp64_norms):
    model = make_nemotron_h()
    ids = _ids()
    imp = collect_importance(model, ids)
    student = prune(model, imp, PruneTarget())
    assert type(student) is type(model) and student is not model
    assert_close(_logits(student, ids), _logits(model, ids), rtol=1e-12)


def test_permuting_within_heads_groups_and_channels_leaves_logits_unchanged(
    make_nemotron_h, fp64_norms
):
    model = make_nemotron_h()
    cfg = model.config
    g = torch.Generator().manual_seed(5)
    plan = _identity_plan(cfg)
    plan.hidden = torch.randperm(
        cfg.hidden_size, generator=g
    )  # embedding channels: any permutation
    for i in plan.ffn:
        plan.ffn[i] = torch.randperm(cfg.intermediate_size, generator=g)
    for i in plan.attn_heads:  # query heads within each KV group
        per = cfg.num_attention_heads // cfg.num_key_value_heads
        plan.attn_heads[i] = torch.cat(
            [k * per + torch.randperm(per, generator=g) for k in range(cfg.num_key_value_heads)]
        )
    for i in (
        plan.mamba
    ):  # Mamba2 heads within each B/C group, channels within a head (the same for all heads)
        per = cfg.mamba_num_heads // cfg.n_groups
        heads = torch.cat([k * per + torch.randperm(per, generator=g) for k in range(cfg.n_groups)])
        plan.mamba[i] = (heads, torch.randperm(cfg.mamba_head_dim, generator=g))
    assert any(not torch.equal(h, torch.arange(len(h))) for h, _ in plan.mamba.values())
    ids = _ids(1)
    permuted = apply_plan(model, plan)
    assert not torch.equal(permuted.model.layers[0].mixer.A_log, model.model.layers[0].mixer.A_log)
    assert_close(_logits(permuted, ids), _logits(model, ids), rtol=1e-12)


def test_heads_moved_across_groups_are_refused(make_nemotron_h):
    model = make_nemotron_h()
    plan = _identity_plan(model.config)
    plan.mamba[0] = (torch.tensor([4, 5, 6, 7, 0, 1, 2, 3]), torch.arange(4))
    with pytest.raises(ValueError, match="group by group"):
        apply_plan(model, plan)
    plan = _identity_plan(model.config)
    plan.mamba[0] = (
        torch.tensor([0, 1, 2, 4]),
        torch.arange(4),
    )  # 3 heads in group 0, 1 in group 1
    with pytest.raises(ValueError, match="same number of heads"):
        apply_plan(model, plan)


def test_group_aware_prune_slices_every_mamba_tensor_by_head_and_channel(make_nemotron_h):
    model = make_nemotron_h()
    ids = _ids(2)
    imp = collect_importance(model, ids)
    imp.mamba_x[0][:4] += 100.0  # every top head of layer 0 in group 0
    plan = make_plan(model, imp, SMALL)
    heads, channels = plan.mamba[0]
    assert (heads // 4).tolist() == [0, 0, 1, 1]
    student = apply_plan(model, plan)
    t, s = model.model.layers[0].mixer, student.model.layers[0].mixer
    for name in ("A_log", "dt_bias", "D"):
        assert torch.equal(getattr(s, name), getattr(t, name)[heads])
    idx = (heads[:, None] * 4 + channels).reshape(-1)
    hid = plan.hidden
    assert torch.equal(s.norm.weight, t.norm.weight[idx])
    assert s.norm.group_size == 4 * 3 // 2  # H'P'/G, from the edited config
    assert torch.equal(s.conv1d.weight[: len(idx)], t.conv1d.weight[32 + idx - 32])
    assert torch.equal(s.conv1d.weight[len(idx) :], t.conv1d.weight[32:])  # B and C whole
    assert torch.equal(
        s.in_proj.weight[len(idx) : 2 * len(idx)], t.in_proj.weight[32 + idx][:, hid]
    )
    assert torch.equal(
        s.in_proj.weight[-4:], t.in_proj.weight[-8:][heads][:, hid]
    )  # dt rows by head
    assert torch.equal(s.out_proj.weight, t.out_proj.weight[hid][:, idx])


@pytest.mark.parametrize("strategy", ["group_aware", "none"])
def test_cached_greedy_generate_equals_no_cache_decoding_after_prune(make_nemotron_h, strategy):
    model = make_nemotron_h()
    ids = _ids(3, (2, 7))
    imp = collect_importance(model, ids)
    target = (
        SMALL
        if strategy == "group_aware"
        else PruneTarget(hidden_size=12, intermediate_size=16, num_layers=5)
    )
    student = prune(model, imp, target, mamba_strategy=strategy)
    student.generation_config.eos_token_id = (
        None  # decode all 6 tokens (no eos stop, no eos masking)
    )
    out = student.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False
    )
    x = ids
    for _ in range(6):
        x = torch.cat([x, _logits(student, x)[:, -1].argmax(-1, keepdim=True)], 1)
    assert out.tolist() == x.tolist()
    assert count_params(student.config) == _n(student) < _n(model)


def test_teacher_is_untouched_and_the_student_round_trips(make_nemotron_h, tmp_path):
    model = make_nemotron_h()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg_before = model.config.to_dict()
    ids = _ids(4)
    imp = collect_importance(model, ids)
    student = prune(model, imp, SMALL)
    with torch.no_grad():
        for p in student.parameters():
            p.add_(1.0)  # the student shares no storage with the teacher
    assert model.config.to_dict() == cfg_before
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    student.save_pretrained(tmp_path)
    again = type(student).from_pretrained(tmp_path, dtype=torch.float64)
    assert_close(_logits(again, ids), _logits(student, ids), rtol=1e-12)


def test_count_params_is_exact(make_nemotron_h, make_llama, make_mamba2):
    models = [
        make_nemotron_h(),
        make_nemotron_h(tie_word_embeddings=True),
        make_nemotron_h(pattern="M*", use_bias=True, mlp_bias=True, use_conv_bias=False),
        make_llama(),
        make_llama(tie_word_embeddings=True),
        make_llama(qwen=True),
        make_llama(attention_bias=True, mlp_bias=True),
        make_mamba2(),
        make_mamba2(tie_word_embeddings=True, use_bias=True),
    ]
    for m in models:
        assert count_params(m.config) == _n(m), type(m).__name__
    with pytest.raises(TypeError, match="config"):
        count_params(object())


@pytest.mark.parametrize(
    ("target", "exc", "name"),
    [
        (PruneTarget(mamba_num_heads=3), ValueError, "mamba_num_heads"),  # G = 2
        (PruneTarget(mamba_head_dim=5), ValueError, "mamba_head_dim"),  # above the original 4
        (PruneTarget(num_layers=0), ValueError, "num_layers"),
        (PruneTarget(hidden_size=17), ValueError, "hidden_size"),
        (PruneTarget(intermediate_size=25), ValueError, "intermediate_size"),
        (PruneTarget(num_attention_heads=3), ValueError, "num_attention_heads"),  # 2 KV heads
        (PruneTarget(num_layers=2.5), TypeError, "num_layers"),
    ],
)
def test_prune_bad_target(make_nemotron_h, target, exc, name):
    model = make_nemotron_h()
    imp = collect_importance(model, _ids())
    with pytest.raises(exc, match=name):
        prune(model, imp, target)


def test_prune_bad_model_importance_and_strategy(make_nemotron_h):
    model = make_nemotron_h()
    imp = collect_importance(model, _ids())
    with pytest.raises(TypeError, match="model"):
        prune(torch.nn.Linear(2, 2), imp, PruneTarget())
    with pytest.raises(TypeError, match="target"):
        prune(model, imp, {"hidden_size": 8})
    with pytest.raises(TypeError, match="importance"):
        prune(model, {}, PruneTarget())
    other = collect_importance(make_nemotron_h(pattern="M-*"), _ids())
    with pytest.raises(ValueError, match="importance"):
        prune(model, other, PruneTarget())
    with pytest.raises(ValueError, match="mamba_strategy"):
        prune(model, imp, PruneTarget(), mamba_strategy="flat_chanel")  # misspelt
    with pytest.raises(ValueError, match="mamba_strategy='none'"):
        prune(model, imp, PruneTarget(mamba_num_heads=4), mamba_strategy="none")


def test_the_float64_norm_patch_is_transformers_math(make_nemotron_h, request):
    # the fp64_norms fixture must compute what transformers computes, only in the input's dtype
    model = make_nemotron_h(dtype=torch.float32)
    ids = _ids(6)
    before = _logits(model, ids)
    request.getfixturevalue("fp64_norms")
    assert torch.equal(_logits(model, ids), before)  # bit for bit in float32


def _llama_logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


@pytest.mark.parametrize("qwen", [False, True])
def test_attention_only_minitron_on_llama_and_qwen2(make_llama, qwen):
    model = make_llama(qwen=qwen, num_hidden_layers=4)
    ids = _ids(7)
    imp = collect_importance(model, ids)
    same = prune(model, imp, PruneTarget())
    assert_close(_llama_logits(same, ids), _llama_logits(model, ids), rtol=1e-12)
    # FFN neurons and query heads within each KV group permuted: exact (no norm sees a reordering)
    plan = make_plan(model, imp, PruneTarget())
    g = torch.Generator().manual_seed(8)
    for i in plan.layers:
        plan.ffn[i] = torch.randperm(24, generator=g)
        plan.attn_heads[i] = torch.cat([k * 2 + torch.randperm(2, generator=g) for k in range(2)])
    assert_close(_llama_logits(apply_plan(model, plan), ids), _llama_logits(model, ids), rtol=1e-12)
    student = prune(
        model,
        imp,
        PruneTarget(hidden_size=12, intermediate_size=16, num_attention_heads=2, num_layers=3),
    )
    assert type(student) is type(model) and student.config.head_dim == 4
    assert count_params(student.config) == _n(student) < _n(model)
    student.generation_config.eos_token_id = None
    out = student.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False
    )
    x = ids
    for _ in range(5):
        x = torch.cat([x, _llama_logits(student, x)[:, -1].argmax(-1, keepdim=True)], 1)
    assert out.tolist() == x.tolist()
    with pytest.raises(ValueError, match="mamba_num_heads"):
        prune(model, imp, PruneTarget(mamba_num_heads=2))


def test_tied_embeddings_stay_tied(make_llama):
    model = make_llama(tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    imp = collect_importance(model, _ids(9))
    student = prune(model, imp, PruneTarget(hidden_size=10))
    assert student.lm_head.weight is student.model.embed_tokens.weight
    assert torch.equal(
        student.model.embed_tokens.weight,
        model.model.embed_tokens.weight[
            :, make_plan(model, imp, PruneTarget(hidden_size=10)).hidden
        ],
    )
    assert count_params(student.config) == _n(student)


@pytest.mark.parametrize("strategy", ["heads_only", "head_dim_only", "random", "group_agnostic"])
def test_baseline_strategies_build_working_students(make_nemotron_h, strategy):
    model = make_nemotron_h()
    ids = _ids(10, (2, 7))
    imp = collect_importance(model, ids)
    imp.mamba_x[0][:4] += 100.0  # every top head of block 0 in group 0
    target = {
        "heads_only": PruneTarget(mamba_num_heads=4),
        "head_dim_only": PruneTarget(mamba_head_dim=2),
        "random": PruneTarget(mamba_num_heads=4, mamba_head_dim=3),
        "group_agnostic": PruneTarget(mamba_num_heads=4, mamba_head_dim=3),
    }[strategy]
    plan = make_plan(model, imp, target, mamba_strategy=strategy)
    heads, channels = plan.mamba[0]
    groups = (heads // 4).tolist()
    if strategy == "group_agnostic":
        assert heads.tolist() == [0, 1, 2, 3] and plan.mamba_regroup  # all of group 0
    elif strategy == "head_dim_only":
        assert heads.tolist() == list(range(8)) and len(channels) == 2
    else:
        assert groups == [0, 0, 1, 1] and len(channels) == (4 if strategy == "heads_only" else 3)
    if strategy == "random":
        again = make_plan(model, imp, target, mamba_strategy="random")
        assert all(torch.equal(a, b) for a, b in zip(again.mamba[0], plan.mamba[0], strict=True))
        other = make_plan(model, imp, target, mamba_strategy="random", seed=1)
        assert any(not torch.equal(other.mamba[i][0], plan.mamba[i][0]) for i in plan.mamba)
    student = apply_plan(model, plan)
    student.generation_config.eos_token_id = None
    out = student.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False
    )
    x = ids
    for _ in range(4):
        x = torch.cat([x, _logits(student, x)[:, -1].argmax(-1, keepdim=True)], 1)
    assert out.tolist() == x.tolist()
    assert count_params(student.config) == _n(student)


def test_baseline_strategies_refuse_targets_they_do_not_prune(make_nemotron_h):
    model = make_nemotron_h()
    imp = collect_importance(model, _ids())
    with pytest.raises(ValueError, match="mamba_head_dim"):
        prune(
            model,
            imp,
            PruneTarget(mamba_num_heads=4, mamba_head_dim=2),
            mamba_strategy="heads_only",
        )
    with pytest.raises(ValueError, match="mamba_num_heads"):
        prune(
            model,
            imp,
            PruneTarget(mamba_num_heads=4, mamba_head_dim=2),
            mamba_strategy="head_dim_only",
        )


def test_depth_only_drops_the_blocks_with_the_lowest_depth_score(make_nemotron_h):
    model = make_nemotron_h()
    imp = collect_importance(model, _ids(11))
    imp.depth = torch.tensor(
        [0.9, 0.1, 0.8, 0.7, 0.05, 0.6]
    )  # blocks 1 (MLP) and 4 (attention) lowest
    student = prune(model, imp, PruneTarget(num_layers=4), mamba_strategy="none")
    assert student.config.layers_block_type == [
        "linear_attention",
        "full_attention",
        "linear_attention",
        "mlp",
    ]
    for j, i in enumerate([0, 2, 3, 5]):
        a, b = student.model.layers[j].state_dict(), model.model.layers[i].state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert count_params(student.config) == _n(student)


def test_mamba2_pruning(make_mamba2):
    from hybridprune.reference import mamba2_mixer_reference

    from neurips25_core.testing import FP32_RTOL

    model = make_mamba2(num_hidden_layers=3)
    ids = _ids(12)
    imp = collect_importance(model, ids)
    assert_close(
        _llama_logits(prune(model, imp, PruneTarget()), ids), _llama_logits(model, ids), rtol=1e-12
    )
    imp.mamba_x[0][:4] += 100.0  # every top head of layer 0 in group 0
    target = PruneTarget(
        hidden_size=12, mamba_num_heads=6, mamba_head_dim=4, num_layers=2
    )  # d_in 24 = 2 * 12
    plan = make_plan(model, imp, target)
    assert (plan.mamba[0][0] // 4).tolist() == [0, 0, 0, 1, 1, 1]
    student = apply_plan(model, plan)
    assert student.config.expand == 2 and count_params(student.config) == _n(student) < _n(model)
    mixer = student.backbone.layers[0].mixer
    x = torch.randn(2, 9, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(13))
    with torch.no_grad():
        assert_close(mixer(x), mamba2_mixer_reference(mixer, x), rtol=FP32_RTOL)
    student.generation_config.eos_token_id = None
    out = student.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False
    )
    x = ids
    for _ in range(5):
        x = torch.cat([x, _llama_logits(student, x)[:, -1].argmax(-1, keepdim=True)], 1)
    assert out.tolist() == x.tolist()
    with pytest.raises(ValueError, match="multiple of hidden_size"):
        prune(model, imp, PruneTarget(hidden_size=12, mamba_num_heads=4, mamba_head_dim=4))
    with pytest.raises(ValueError, match="intermediate_size"):
        prune(model, imp, PruneTarget(intermediate_size=8))
