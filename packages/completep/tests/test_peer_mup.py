"""With the `mup` peer installed, kind="mup" gives each parameter the LR that mup's MuAdamW gives it."""

import pytest
import torch
from completep import ParamConfig, param_groups, parameterize, scaled_config
from transformers import LlamaForCausalLM

from neurips25_core.models import tiny_llama_config

mup = pytest.importorskip(
    "mup",
    reason="peer `mup` not installed (`uv pip install --no-deps mup`); MuAdamW comparison skipped",
)


def test_mup_kind_lrs_equal_muadamw():
    base_config = tiny_llama_config(hidden_size=16, num_layers=2, num_heads=2, intermediate_size=64)

    def build(width):
        torch.manual_seed(0)
        model = LlamaForCausalLM(scaled_config(base_config, width, 2))
        # mup insists on its MuReadout for the unembedding (only the LRs are compared here; its
        # 1/width_mult forward would double our lm_head hook, so no forward is run)
        model.lm_head = mup.MuReadout(width, 256, bias=False)
        return model

    base, delta, target = build(16), build(32), build(64)
    mup.set_base_shapes(target, base, delta=delta)
    theirs = {}
    for group in mup.MuAdamW(target.parameters(), lr=1e-2).param_groups:
        for p in group["params"]:
            theirs[id(p)] = group["lr"]
    cfg = ParamConfig(kind="mup", base_width=16, base_depth=2)
    parameterize(target, cfg)
    ours = {}
    for group in param_groups(target, cfg, lr=1e-2):
        for p in group["params"]:
            ours[id(p)] = group["lr"]
    assert ours.keys() == theirs.keys()
    names = {id(p): n for n, p in target.named_parameters()}
    for key, lr in theirs.items():
        assert ours[key] == pytest.approx(lr, rel=1e-12), names[key]
    assert min(ours.values()) == pytest.approx(1e-2 / 4)  # the hidden weights: η / m_N


def test_mup_peer_optimizer_matches_ours_at_base_width():
    """A's peer check: MuAdamW + MuReadout on a kind="mup" model = our groups, loss for loss."""
    from completep.bench import _base_config, _mup_peer_check

    from neurips25_core.data import stdlib_corpus

    class Ctx:
        def __init__(self):
            self.records = []

        def log(self, msg):
            pass

        def record(self, metric, value, unit, **params):
            self.records.append((metric, value))

    ctx = Ctx()
    _mup_peer_check(ctx, _base_config(16, 2, 64, 16), 16, -6, stdlib_corpus(), 16, 4)
    assert ctx.records[0][0] == "mup_peer_max_loss_diff"
    assert ctx.records[0][1] <= 1e-6
