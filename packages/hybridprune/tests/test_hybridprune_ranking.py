"""Ranking: group-aware head selection, the shared channel set, kept-channel head ranking, bad input."""

import pytest
import torch
from hybridprune import rank_attention_heads, rank_channels, rank_mamba


def test_group_aware_keeps_the_same_number_per_group_when_all_top_heads_are_in_group_0():
    # H = 8 heads in G = 2 groups; every head of group 0 outscores every head of group 1
    g = torch.Generator().manual_seed(0)
    x = torch.rand(8, 6, generator=g, dtype=torch.float64)
    x[:4] += 10.0
    heads, channels = rank_mamba(x, n_groups=2, num_heads=4, head_dim=3)
    assert heads.tolist() == sorted(heads.tolist())
    assert sum(h < 4 for h in heads.tolist()) == 2 and sum(h >= 4 for h in heads.tolist()) == 2
    # the global top four (what a group-agnostic ranking would keep) are all of group 0
    eta = x[:, channels].norm(dim=1)
    assert set(eta.topk(4).indices.tolist()) == {0, 1, 2, 3}
    # within each group, the best two heads on the kept channels
    for grp in range(2):
        want = set((grp * 4 + eta[grp * 4 : grp * 4 + 4].topk(2).indices).tolist())
        assert want == {h for h in heads.tolist() if h // 4 == grp}


def test_channel_set_is_shared_and_ranked_by_the_l2_norm_over_heads():
    x = torch.tensor(
        [[1.0, 0.0, 2.0, 0.0], [1.0, 0.0, 0.0, 3.0], [1.0, 0.1, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]],
        dtype=torch.float64,
    )
    # column norms 2, 0.1, 2, 3: keep channel 3 and channel 0 (tied with 2, the lower index wins)
    heads, channels = rank_mamba(x, n_groups=1, num_heads=4, head_dim=2)
    assert channels.tolist() == [0, 3]
    assert channels.dtype == torch.long and heads.tolist() == [0, 1, 2, 3]


def test_head_ranking_uses_only_the_kept_channels():
    # head 0 is large on channel 1 only; heads 1-3 share channel 0, so channel 0 wins the channel
    # ranking (sqrt(3.1^2 + 3^2 + 3^2) > 5) and channel 1 is pruned. On the kept channel head 1 is best;
    # on all channels head 0 (norm 5) would be.
    x = torch.tensor([[0.0, 5.0], [3.1, 0.0], [3.0, 0.0], [3.0, 0.0]], dtype=torch.float64)
    heads, channels = rank_mamba(x, n_groups=1, num_heads=1, head_dim=1)
    assert channels.tolist() == [0]
    assert heads.tolist() == [1]
    heads_all, channels_all = rank_mamba(
        x, n_groups=1, num_heads=1, head_dim=1, head_ranking="all_channels"
    )
    assert channels_all.tolist() == [0] and heads_all.tolist() == [0]


def test_keep_everything_is_the_identity():
    x = torch.rand(6, 5, dtype=torch.float64)
    heads, channels = rank_mamba(x, n_groups=3, num_heads=6, head_dim=5)
    assert heads.tolist() == list(range(6)) and channels.tolist() == list(range(5))
    assert rank_channels(torch.rand(7), 7).tolist() == list(range(7))
    assert rank_attention_heads(torch.rand(8), 2, 4).tolist() == list(range(8))


def test_rank_attention_heads_keeps_the_same_number_per_kv_group():
    s = torch.tensor([9.0, 8.0, 7.0, 6.0, 1.0, 2.0, 3.0, 0.5])
    assert rank_attention_heads(s, n_kv=2, keep_per_group=2).tolist() == [0, 1, 5, 6]
    assert rank_attention_heads(s, n_kv=1, keep_per_group=3).tolist() == [0, 1, 2]


def test_rank_channels_breaks_ties_toward_the_lower_index():
    assert rank_channels(torch.tensor([1.0, 2.0, 2.0, 2.0]), 2).tolist() == [1, 2]


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        (dict(n_groups=3), ValueError, "n_groups"),  # 8 heads, 3 groups
        (dict(num_heads=3), ValueError, "num_heads"),  # not a multiple of G = 2
        (dict(num_heads=10), ValueError, "num_heads"),
        (dict(num_heads=0), ValueError, "num_heads"),
        (dict(head_dim=7), ValueError, "head_dim"),  # above the original P = 6
        (dict(head_dim=0), ValueError, "head_dim"),
        (dict(head_dim=2.0), TypeError, "head_dim"),
        (dict(head_ranking="global"), ValueError, "head_ranking"),
        (dict(x_scores=torch.rand(8)), ValueError, "x_scores"),
        (dict(x_scores=torch.ones(8, 6, dtype=torch.long)), TypeError, "x_scores"),
        (dict(x_scores=torch.full((8, 6), float("nan"))), ValueError, "x_scores"),
        (dict(x_scores=[[1.0]]), TypeError, "x_scores"),
    ],
)
def test_rank_mamba_bad_input(kwargs, exc, name):
    args = dict(x_scores=torch.rand(8, 6), n_groups=2, num_heads=4, head_dim=3) | kwargs
    with pytest.raises(exc, match=name):
        rank_mamba(**args)


def test_rank_attention_heads_and_channels_bad_input():
    with pytest.raises(ValueError, match="n_kv"):
        rank_attention_heads(torch.rand(6), n_kv=4, keep_per_group=1)
    with pytest.raises(ValueError, match="keep_per_group"):
        rank_attention_heads(torch.rand(6), n_kv=2, keep_per_group=4)
    with pytest.raises(ValueError, match="keep"):
        rank_channels(torch.rand(6), 0)
    with pytest.raises(ValueError, match="scores"):
        rank_channels(torch.rand(2, 3), 1)
