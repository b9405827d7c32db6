"""Token trees, greedy verification: the masked executor against per-path forwards, tree
verification against the reference (fresh HF forwards per path), generation = greedy decoding,
and a one-branch tree = the chain."""

from __future__ import annotations

import pytest
import torch
from easyspec import (
    FuzzyDraft,
    TokenTree,
    autoregressive_generate,
    draft_tree,
    speculative_generate,
    verify_tree_greedy,
    verify_tree_greedy_reference,
)

from neurips25_core.models import tiny_llama, tiny_llama_config
from neurips25_core.testing import assert_close


def _model(layers, width=32, heads=4, kv=2, seed=0, dtype=torch.float64, vocab=256):
    cfg = tiny_llama_config(
        hidden_size=width,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        vocab_size=vocab,
        max_position_embeddings=160,
    )
    return tiny_llama(cfg, seed=seed).to(dtype).eval()


IDS = torch.tensor([[5, 17, 200, 3, 99, 42, 7, 8, 250]])


@pytest.mark.parametrize("group_size", [1, 4])
def test_tree_draft_logits_equal_per_path_steps(group_size):
    """Each node's draft logits (tree mask, one forward per depth) equal stepping its path alone;
    fuzzy too, since a node only sees its own path."""
    m = _model(6)
    d = FuzzyDraft(m, group_size=group_size)
    first = d.prefill(IDS)[-1]
    tree = draft_tree(d, first, (3, 2, 2))
    assert len(tree) == 3 + 6 + 12 and tree.depths == [1] * 3 + [2] * 6 + [3] * 12
    assert len(set(tree.tokens[:3])) == 3 and tree.tokens[0] == int(first.argmax())
    for node in range(len(tree)):
        if tree.depths[node] == 3:
            continue
        path = tree.path(node)
        ref = FuzzyDraft(m, group_size=group_size)
        ref.prefill(IDS)
        for i in path:
            logits = ref.step(tree.tokens[i])
        kids = tree.children(node)
        assert [tree.tokens[c] for c in kids] == torch.sort(
            logits, descending=True, stable=True
        ).indices[: len(kids)].tolist()
        # the node's own K/V in the tree slot equal the per-path step's
        for layer in range(6):
            assert_close(d._k[layer, :, tree.slots[node]], ref._k[layer, :, ref.length - 1])


def test_tree_verify_equals_reference_on_random_trees():
    """Masked one-forward verification = the reference (a fresh full forward per path), on
    random trees whose tokens partly follow the base's greedy path."""
    base = _model(2, seed=1)
    seq = IDS[0].tolist()
    greedy = autoregressive_generate(base, IDS, max_new_tokens=4)[0, len(seq) :].tolist()
    g = torch.Generator().manual_seed(0)
    for trial in range(6):
        tokens, parents, depths = [], [], []
        frontier = [-1]
        for depth in range(1, 4):
            new = []
            for p in frontier:
                k = int(torch.randint(1, 3, (), generator=g))
                onpath = p == -1 or tokens[p] == greedy[depths[p] - 1]
                picks = torch.randperm(256, generator=g)[:k].tolist()
                if onpath and trial % 3 != 2:  # let the greedy token sit among the siblings
                    picks = [greedy[depth - 1], *[x for x in picks if x != greedy[depth - 1]]]
                    picks = picks[:k]
                    picks = picks[::-1] if trial % 2 else picks
                for x in picks:
                    tokens.append(x)
                    parents.append(p)
                    depths.append(depth)
                    new.append(len(tokens) - 1)
            frontier = new
        tree = TokenTree(tokens, parents, depths, [-1] * len(tokens))
        verifier = FuzzyDraft(base, group_size=1)
        verifier.prefill(IDS[:, :-1])
        start = verifier.length
        n = len(tree)
        mask = torch.zeros(1 + n, start + 1 + n, dtype=torch.bool)
        mask[:, : start + 1] = True
        mask[1:, start + 1 :] = tree.ancestors()
        pos = torch.tensor([start, *(start + dd for dd in tree.depths)])
        logits = verifier.extend(
            torch.tensor([seq[-1], *tokens]), exact=True, positions=pos, mask=mask
        )
        got = verify_tree_greedy(tree, logits)
        ref = verify_tree_greedy_reference(base, seq, tree)
        assert got == ref
        assert [tokens[i] for i in got[0]] + [got[1]] == greedy[: len(got[0]) + 1]


@pytest.mark.parametrize(
    ("branching", "group_size", "calibrate"),
    [
        ((2, 2, 1), 1, True),
        ((2, 2, 1), 4, False),
        ((3, 1, 2, 1), 4, True),
        ((3, 1, 2, 1), 1, False),
    ],
)
def test_tree_generation_is_greedy(branching, group_size, calibrate):
    base, draft = _model(2, seed=1), _model(6, seed=2)
    ref = autoregressive_generate(base, IDS, max_new_tokens=24)
    out, st = speculative_generate(
        base,
        draft,
        IDS,
        gamma=len(branching),
        tree=branching,
        group_size=group_size,
        calibrate=calibrate,
        max_new_tokens=24,
    )
    assert torch.equal(out, ref)
    assert st.iterations == st.base_forwards - 1 and st.verified_tokens > st.iterations


@pytest.mark.parametrize("group_size", [1, 4])
def test_one_branch_tree_is_the_chain(group_size):
    base, draft = _model(2, seed=1), _model(6, seed=2)
    kw = dict(gamma=4, group_size=group_size, max_new_tokens=24)
    chain, cs = speculative_generate(base, draft, IDS, **kw)
    tree, ts = speculative_generate(base, draft, IDS, tree=(1, 1, 1, 1), **kw)
    assert torch.equal(tree, chain)
    assert ts.accepted == cs.accepted and ts.draft_stages == cs.draft_stages


def test_wider_tree_accepts_at_least_the_chain_per_iteration():
    """From the same state the top-1 path of a tree is the chain, so it accepts at least as
    much; a self-draft accepts everything."""
    base, draft = _model(2, seed=1), _model(6, seed=2)
    seq = IDS[0].tolist()
    for b in [(1, 1, 1), (2, 2, 2)]:
        d = FuzzyDraft(draft, group_size=1)
        tree = draft_tree(d, d.prefill(IDS)[-1], b)
        got = verify_tree_greedy_reference(base, seq, tree)
        if b == (1, 1, 1):
            chain_k = len(got[0])
        else:
            assert len(got[0]) >= chain_k
    _, st = speculative_generate(base, base, IDS, gamma=3, tree=(2, 1, 1), group_size=1)
    assert st.acceptance_rate == 1.0


def test_tree_bad_input():
    base, draft = _model(2, seed=1), _model(4, seed=2)
    with pytest.raises(ValueError, match="tree"):
        speculative_generate(base, draft, IDS, gamma=3, tree=(2, 1))
    with pytest.raises(ValueError, match="tree"):
        speculative_generate(base, draft, IDS, gamma=2, tree=(2, 0))
    with pytest.raises(TypeError, match="tree"):
        speculative_generate(base, draft, IDS, gamma=2, tree=2)
    with pytest.raises(ValueError, match=r"tree.*temperature"):
        speculative_generate(base, draft, IDS, gamma=2, tree=(2, 1), temperature=0.8)
    with pytest.raises(ValueError, match="max_new_tokens"):
        speculative_generate(base, draft, IDS, gamma=2, tree=(12, 12), max_new_tokens=8)
    d = FuzzyDraft(draft, group_size=1)
    d.prefill(IDS)
    with pytest.raises(ValueError, match="mask"):
        d.extend(torch.tensor([1, 2]), mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="positions"):
        d.extend(torch.tensor([1, 2]), positions=torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="slots"):
        d.select(2, [0])
    assert d.length == IDS.shape[1]  # refused calls lose nothing
