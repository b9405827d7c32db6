"""Table 1 scalars against the formulas, and bad configurations."""

import math

import pytest
from completep import ParamConfig, multipliers


def test_completep_at_mn4_ml8():
    m = multipliers(ParamConfig(kind="completep", base_width=64, base_depth=2), 256, 16)
    assert (m.width_ratio, m.depth_ratio) == (4.0, 8.0)
    hidden = m.groups["hidden_weight"]
    assert hidden.lr == pytest.approx(1 / 4, rel=1e-15)
    assert m.residual == pytest.approx(1 / 8, rel=1e-15)
    assert hidden.eps == pytest.approx(1 / 32, rel=1e-15)
    assert m.groups["block_norm"].eps == pytest.approx(1 / 32, rel=1e-15)
    assert hidden.weight_decay == pytest.approx(4.0, rel=1e-15)
    assert hidden.init_std == pytest.approx(0.02 / 2, rel=1e-15)
    assert m.logits == pytest.approx(1 / 4)
    # outside the blocks: base LR, ε and decay (Table 1, eps_scope="blocks")
    for g in ("embedding", "unembedding"):
        assert (m.groups[g].lr, m.groups[g].eps, m.groups[g].weight_decay) == (1.0, 1.0, 1.0)
    assert m.groups["final_norm"].weight_decay == 0.0
    assert m.groups["block_norm"].lr == 1.0  # m_L^(α−1) = 1 at α = 1


def test_depth_mup_at_mn4_ml8():
    m = multipliers(ParamConfig(kind="depth_mup", base_width=64, base_depth=2), 256, 16)
    hidden = m.groups["hidden_weight"]
    assert hidden.lr == pytest.approx(1 / (4 * math.sqrt(8)), rel=1e-14)
    assert m.residual == pytest.approx(1 / math.sqrt(8), rel=1e-14)
    assert hidden.eps == pytest.approx(1 / (4 * math.sqrt(8)), rel=1e-14)
    assert m.groups["block_norm"].lr == pytest.approx(1 / math.sqrt(8), rel=1e-14)
    assert m.groups["hidden_bias"].lr == pytest.approx(1 / math.sqrt(8), rel=1e-14)


def test_mup_and_sp():
    mup = multipliers(ParamConfig(kind="mup", base_width=64, base_depth=2), 256, 16)
    assert mup.residual == 1.0 and mup.groups["hidden_weight"].lr == 0.25
    assert mup.groups["hidden_weight"].eps == 0.25 and mup.attention_power == 1.0
    sp = multipliers(ParamConfig(kind="sp", base_width=64, base_depth=2), 256, 16)
    assert sp.attention_power == 0.5 and sp.residual == 1.0 and sp.logits == 1.0
    assert all(g.lr == 1.0 and g.eps == 1.0 for g in sp.groups.values())


def test_official_code_switches():
    cfg = ParamConfig(kind="completep", eps_scope="global", wd_width_scaling=False)
    m = multipliers(cfg, 256, 16)
    assert m.groups["embedding"].eps == pytest.approx(1 / 32)
    assert m.groups["final_norm"].eps == pytest.approx(1 / 32)
    assert m.groups["hidden_weight"].weight_decay == 1.0


def test_alpha_override():
    m = multipliers(ParamConfig(kind="mup", alpha=0.75), 64, 16)
    assert m.residual == pytest.approx(8**-0.75)


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"kind": "nope"}, ValueError, "kind"),
        ({"base_width": 0}, ValueError, "base_width"),
        ({"base_depth": -1}, ValueError, "base_depth"),
        ({"base_width": 2.0}, TypeError, "base_width"),
        ({"alpha": 1.5}, ValueError, "alpha"),
        ({"alpha": -0.1}, ValueError, "alpha"),
        ({"kind": "sp", "alpha": 0.5}, ValueError, "alpha"),
        ({"sigma_base": 0.0}, ValueError, "sigma_base"),
        ({"eps_scope": "all"}, ValueError, "eps_scope"),
    ],
)
def test_bad_config(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        ParamConfig(**kwargs)


def test_small_alpha_warns():
    with pytest.warns(UserWarning, match="alpha"):
        ParamConfig(kind="completep", alpha=0.25)


def test_bad_shape():
    cfg = ParamConfig()
    with pytest.raises(ValueError, match="width"):
        multipliers(cfg, 0, 2)
    with pytest.raises(TypeError, match="depth"):
        multipliers(cfg, 64, 2.5)
    with pytest.raises(TypeError, match="cfg"):
        multipliers("completep", 64, 2)
