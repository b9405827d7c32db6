"""search: candidates within the limits and the budget, the top_k closest scored, bad input."""

import pytest
import torch
from hybridprune import PruneTarget, collect_importance, count_params, prune, search

AXES = dict(hidden_divisor=2, ffn_divisor=4, head_dim_divisor=1)


@pytest.fixture
def teacher(make_nemotron_h):
    model = make_nemotron_h(dtype=torch.float32)
    imp = collect_importance(
        model, torch.randint(3, 64, (2, 8), generator=torch.Generator().manual_seed(0))
    )
    return model, imp


def test_search_scores_the_top_k_closest_candidates_under_the_budget(teacher):
    model, imp = teacher
    full = count_params(model.config)
    seen = []

    def score(student):  # prefers fewer Mamba2 head channels: checks that the lowest score wins
        seen.append(sum(p.numel() for p in student.parameters()))
        return float(student.config.mamba_head_dim) + 1e-6 * seen[-1]

    best, table = search(model, imp, params=0.75, score_fn=score, top_k=5, **AXES)
    assert len(table) == len(seen) == 5
    assert sorted(r["params"] for r in table) == sorted(
        seen
    )  # count_params = the real students' counts
    assert all(r["params"] <= int(0.75 * full) for r in table)
    assert [r["score"] for r in table] == sorted(r["score"] for r in table)
    assert best == PruneTarget(**{k: table[0][k] for k in vars(best)})
    for r in table:  # within 40% width and 20% depth pruning, heads a multiple of G
        assert r["hidden_size"] >= 0.6 * 16 and r["intermediate_size"] >= 0.6 * 24
        assert (
            r["mamba_num_heads"] % 2 == 0
            and r["mamba_num_heads"] >= 0.6 * 8
            and r["mamba_head_dim"] >= 0.6 * 4
        )
        assert r["num_layers"] >= 0.8 * 6
    # a larger top_k scores a superset, and no unscored candidate is closer to the budget
    _, wide = search(model, imp, params=0.75, score_fn=lambda m: 0.0, top_k=1000, **AXES)
    assert min(r["params"] for r in table) >= sorted((r["params"] for r in wide), reverse=True)[4]
    student = prune(model, imp, best)
    assert count_params(student.config) == table[0]["params"]


def test_search_bad_input(teacher):
    model, imp = teacher
    with pytest.raises(ValueError, match="params"):
        search(model, imp, params=0.1, score_fn=lambda m: 0.0, **AXES)  # below 60% width, 80% depth
    with pytest.raises(ValueError, match="params"):
        search(model, imp, params=10**9, score_fn=lambda m: 0.0, **AXES)
    with pytest.raises(ValueError, match="params"):
        search(model, imp, params=-3, score_fn=lambda m: 0.0, **AXES)
    with pytest.raises(TypeError, match="score_fn"):
        search(model, imp, params=0.8, score_fn=None, **AXES)
    with pytest.raises(ValueError, match="max_width_pruning"):
        search(model, imp, params=0.8, score_fn=lambda m: 0.0, max_width_pruning=1.0)
    with pytest.raises(ValueError, match="top_k"):
        search(model, imp, params=0.8, score_fn=lambda m: 0.0, top_k=0)
