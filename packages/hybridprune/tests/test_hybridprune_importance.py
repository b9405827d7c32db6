"""collect_importance: the aggregator's formula, batch-split invariance, padding, DDP, bad input."""

import pytest
import torch
from hybridprune import Importance, collect_importance

from neurips25_core.distributed import run_distributed
from neurips25_core.testing import assert_close


def _fields(imp: Importance) -> dict[str, torch.Tensor]:
    out = {"hidden": imp.hidden, "depth": imp.depth}
    for name in ("ffn", "attn_heads", "mamba_x"):
        for i, t in getattr(imp, name).items():
            out[f"{name}.{i}"] = t
    return out


def _assert_same(a: Importance, b: Importance, rtol=1e-6):
    fa, fb = _fields(a), _fields(b)
    assert fa.keys() == fb.keys()
    for k in fa:
        assert_close(fa[k], fb[k], rtol=rtol)
    assert a.tokens == b.tokens


def _raw_activations(model, batches):
    """Every hooked activation, captured by hooks written here, independently of the package."""
    rec: dict[tuple, list] = {}
    hs = []

    def keep(key, fn):
        def hook(mod, args, out):
            rec.setdefault(key, []).append(fn(args, out).detach().clone())

        return hook

    for i, blk in enumerate(model.model.layers):
        hs.append(blk.norm.register_forward_hook(keep(("hidden", i), lambda a, o: o)))
        hs.append(blk.register_forward_hook(keep(("in", i), lambda a, o: a[0])))
        hs.append(blk.register_forward_hook(keep(("out", i), lambda a, o: o)))
        if blk.block_type == "mlp":
            hs.append(
                blk.mixer.down_proj.register_forward_hook(keep(("ffn", i), lambda a, o: a[0]))
            )
        elif blk.block_type == "full_attention":
            hs.append(blk.mixer.o_proj.register_forward_hook(keep(("attn", i), lambda a, o: a[0])))
        else:
            hs.append(
                blk.mixer.in_proj.register_forward_hook(
                    keep(("mamba", i), lambda a, o: o[..., 32:64])
                )
            )
    with torch.no_grad():
        for ids, mask in batches:
            model(input_ids=ids, attention_mask=mask, use_cache=False)
    for h in hs:
        h.remove()
    return rec


def _formula(acts, masks):
    """sqrt(Σ over every sequence of (mean over its real tokens of |a|)²), one loop per sequence."""
    total = 0.0
    for a, mask in zip(acts, masks, strict=True):
        for b in range(a.shape[0]):
            keep = mask[b].bool()
            total = total + a[b, keep].abs().mean(0).pow(2)
    return total.sqrt()


def test_aggregator_matches_its_formula_on_nemotron_h(make_nemotron_h):
    model = make_nemotron_h()
    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(0, 64, (3, 10), generator=g), torch.randint(0, 64, (2, 7), generator=g)]
    masks = [torch.ones(3, 10, dtype=torch.long), torch.tensor([[1] * 7, [1] * 4 + [0] * 3])]
    masks[0][1, 6:] = 0
    imp = collect_importance(
        model, [{"input_ids": i, "attention_mask": m} for i, m in zip(ids, masks, strict=True)]
    )
    rec = _raw_activations(model, list(zip(ids, masks, strict=True)))
    hidden = sum(_formula(rec[("hidden", i)], masks) for i in range(6))
    assert_close(imp.hidden, hidden.float(), rtol=1e-6)
    # pattern M-*M*-: Mamba2 at 0 and 3, MLP at 1 and 5, attention at 2 and 4
    assert (
        sorted(imp.ffn) == [1, 5]
        and sorted(imp.attn_heads) == [2, 4]
        and sorted(imp.mamba_x) == [0, 3]
    )
    for i in imp.ffn:
        assert_close(imp.ffn[i], _formula(rec[("ffn", i)], masks).float(), rtol=1e-6)
    for i in imp.attn_heads:
        want = _formula(rec[("attn", i)], masks).view(4, 4).norm(dim=1)
        assert_close(imp.attn_heads[i], want.float(), rtol=1e-6)
    for i in imp.mamba_x:
        assert_close(
            imp.mamba_x[i], _formula(rec[("mamba", i)], masks).view(8, 4).float(), rtol=1e-6
        )
    depth = []
    for i in range(6):
        num = sum(
            ((1 - torch.cosine_similarity(a, b, dim=-1)) * m).sum()
            for a, b, m in zip(rec[("in", i)], rec[("out", i)], masks, strict=True)
        )
        depth.append(num / sum(m.sum() for m in masks))
    assert_close(imp.depth, torch.stack(depth).float(), rtol=1e-6)
    assert imp.tokens == 3 * 10 - 4 + 7 + 4


def test_mean_over_tokens_then_l2_over_sequences_on_a_hand_built_tensor():
    # the aggregator on a hand-built activation: a = [[1, -3], [2, 2]] over 2 tokens for sequence 0,
    # [[4, 0]] (one real token, one padded) for sequence 1. m0 = (1.5, 2.5), m1 = (4, 0):
    # score = sqrt(1.5² + 4², 2.5² + 0²) = (sqrt(18.25), 2.5), not the L2 norm over all tokens.
    from hybridprune.importance import _Acc

    acc = _Acc()
    a = torch.tensor([[[1.0, -3.0], [2.0, 2.0]], [[4.0, 0.0], [100.0, 100.0]]])
    acc.add(a, torch.tensor([[1, 1], [1, 0]]))
    assert_close(acc.sq.sqrt(), torch.tensor([18.25**0.5, 2.5], dtype=torch.float64), rtol=1e-12)


@pytest.mark.parametrize("family", ["nemotron_h", "llama", "qwen2", "mamba2"])
def test_invariant_to_batch_splitting_and_padding_excluded(
    family, make_nemotron_h, make_llama, make_mamba2
):
    model = {
        "nemotron_h": make_nemotron_h,
        "llama": make_llama,
        "qwen2": lambda: make_llama(qwen=True),
        "mamba2": make_mamba2,
    }[family]()
    g = torch.Generator().manual_seed(2)
    lengths = [9, 5, 7, 9]
    seqs = [torch.randint(0, 64, (n,), generator=g) for n in lengths]
    one = collect_importance(model, torch.stack([seqs[0], seqs[3]]))
    split = collect_importance(model, [seqs[0][None], seqs[3][None]])
    _assert_same(one, split)
    # padding: right-padded with junk tokens vs every sequence alone without padding
    padded = torch.randint(0, 64, (4, 9), generator=g)
    mask = torch.zeros(4, 9, dtype=torch.long)
    for b, s in enumerate(seqs):
        padded[b, : len(s)] = s
        mask[b, : len(s)] = 1
    with_pad = collect_importance(model, padded, attention_mask=mask)
    alone = collect_importance(model, [s[None] for s in seqs])
    _assert_same(with_pad, alone)
    assert with_pad.tokens == sum(lengths)


def test_two_gloo_processes_give_the_single_process_scores(make_llama):
    model = make_llama()
    g = torch.Generator().manual_seed(3)
    data = torch.randint(0, 64, (4, 8), generator=g)
    single = collect_importance(model, [data[:2], data[2:]])

    def rank_fn(rank, world_size, data):
        return collect_importance(model, [data[rank * 2 : rank * 2 + 2]])

    for got in run_distributed(rank_fn, world_size=2, args=(data,)):
        _assert_same(got, single)


def test_bad_input(make_llama):
    model = make_llama()
    with pytest.raises(TypeError, match="model"):
        collect_importance(torch.nn.Linear(2, 2), torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="batches"):
        collect_importance(model, [torch.rand(2, 3)])
    with pytest.raises(ValueError, match="batches"):
        collect_importance(model, [torch.zeros(3, dtype=torch.long)])
    with pytest.raises(ValueError, match="batches"):
        collect_importance(model, [])
    with pytest.raises(ValueError, match="attention_mask"):
        collect_importance(
            model, torch.zeros(2, 3, dtype=torch.long), attention_mask=torch.ones(2, 4)
        )
    with pytest.raises(ValueError, match="attention_mask"):
        collect_importance(
            model, torch.zeros(2, 3, dtype=torch.long), attention_mask=torch.full((2, 3), 2)
        )
    assert not any(h for m in model.modules() for h in m._forward_hooks.values()), (
        "hooks were removed"
    )
