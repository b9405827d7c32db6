"""SinkGD, SWAN and the AdamW hybrids as torch optimizers: statelessness, conventions, routing, errors."""

import copy
import math

import pytest
import sinkgd
import torch
from sinkgd import reference
from sinkgd.optim import sinkgd_update_
from torch import nn

from neurips25_core.testing import assert_close, randn


def matrices(*shapes, seed=0, dtype=torch.float32):
    return [nn.Parameter(randn(*s, seed=seed + i, dtype=dtype)) for i, s in enumerate(shapes)]


def set_grads(params, seed=100):
    for i, p in enumerate(params):
        p.grad = randn(*p.shape, seed=seed + i, dtype=p.dtype)


class TinyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.up = nn.Linear(8, 12)
        self.norm = nn.LayerNorm(12)
        self.down = nn.Linear(12, 8, bias=False)
        self.lm_head = nn.Linear(8, 11, bias=False)

    def forward(self, x):
        return self.lm_head(self.down(self.norm(torch.relu(self.up(self.embed(x))))))


def loss_of(model, seed=0):
    x = torch.randint(0, 11, (4, 5), generator=torch.Generator().manual_seed(seed))
    return nn.functional.cross_entropy(model(x).reshape(-1, 11), x.reshape(-1))


# ----------------------------------------------------------------------------- SinkGD


def test_step_equals_reference_and_holds_no_state():
    params = matrices((7, 5), (16, 9), (1, 6))
    ref = [p.detach().double().clone() for p in params]
    opt = sinkgd.SinkGD(params, lr=0.01, num_iters=5, weight_decay=0.1)
    for step in range(4):
        set_grads(params, seed=10 * step)
        ref = [reference.sinkgd_step(r, p.grad.double(), 0.01, 5, 0.1) for r, p in zip(ref, params)]
        opt.step()
    assert len(opt.state) == 0
    assert opt.state_dict()["state"] == {}
    for p, r in zip(params, ref):
        assert_close(p.detach(), r, rtol=1e-6)


def test_state_dict_round_trip_reproduces_the_next_step():
    params = matrices((6, 9), (9, 6))
    opt = sinkgd.SinkGD(
        [{"params": params[:1]}, {"params": params[1:], "lr": 0.05, "num_iters": 2}], lr=0.01
    )
    set_grads(params, 1)
    opt.step()
    saved = copy.deepcopy(opt.state_dict())
    clones = [nn.Parameter(p.detach().clone()) for p in params]
    opt2 = sinkgd.SinkGD([{"params": clones[:1]}, {"params": clones[1:]}], lr=0.3, num_iters=9)
    opt2.load_state_dict(saved)
    assert opt2.param_groups[1]["lr"] == 0.05 and opt2.param_groups[1]["num_iters"] == 2
    set_grads(params, 2)
    set_grads(clones, 2)
    opt.step()
    opt2.step()
    for a, b in zip(params, clones):
        assert torch.equal(a, b)


def test_closure_grad_none_and_add_param_group():
    model = nn.Sequential(nn.Linear(5, 7, bias=False), nn.Linear(7, 3, bias=False))
    frozen = nn.Parameter(torch.ones(4, 4))
    opt = sinkgd.SinkGD([*list(model.parameters()), frozen], lr=0.01)
    x = randn(6, 5, seed=1)

    def closure():
        opt.zero_grad()
        loss = model(x).pow(2).sum()
        loss.backward()
        return loss

    before = [p.detach().clone() for p in model.parameters()]
    loss = opt.step(closure)
    assert isinstance(loss, torch.Tensor) and loss.item() > 0
    assert frozen.grad is None and torch.equal(frozen, torch.ones(4, 4))  # skipped, untouched
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    extra = nn.Parameter(randn(3, 8, seed=3))
    opt.add_param_group({"params": [extra], "lr": 0.5})
    assert opt.param_groups[-1]["num_iters"] == 5
    extra.grad = randn(3, 8, seed=4)
    w0 = extra.detach().clone()
    opt.step()
    assert_close(extra.detach(), w0 - 0.5 * reference.sr_sinkhorn(extra.grad), rtol=1e-6)


def test_foreach_equals_per_parameter():
    shapes = [(6, 10), (6, 10), (10, 6), (6, 10), (3, 3)]
    a = matrices(*shapes, seed=20)
    b = [nn.Parameter(p.detach().clone()) for p in a]
    set_grads(a, 5)
    set_grads(b, 5)
    sinkgd.SinkGD(a, lr=0.02, weight_decay=0.1, foreach=True).step()
    sinkgd.SinkGD(b, lr=0.02, weight_decay=0.1, foreach=False).step()
    for x, y in zip(a, b):
        assert_close(x.detach(), y.detach(), rtol=1e-6)


def test_bf16_parameters_are_updated_through_fp32():
    w32 = nn.Parameter(randn(12, 20, seed=30))
    w16 = nn.Parameter(w32.detach().bfloat16())
    g = randn(12, 20, seed=31)
    w32.grad, w16.grad = g.clone(), g.bfloat16()
    lr = 1e-3
    sinkgd.SinkGD([w16], lr=lr).step()
    assert w16.dtype == torch.bfloat16
    expected = (
        w32.detach().bfloat16().float() - lr * reference.sr_sinkhorn(g.bfloat16().double()).float()
    )
    # one rounding of the fp32 result to bf16, not a bf16 computation
    assert torch.equal(w16.detach(), expected.bfloat16())


def test_tensor_lr_equals_float_lr():
    a = matrices((5, 8), seed=40)
    b = [nn.Parameter(a[0].detach().clone())]
    set_grads(a, 41)
    set_grads(b, 41)
    sinkgd.SinkGD(a, lr=torch.tensor(0.03)).step()
    sinkgd.SinkGD(b, lr=0.03).step()
    assert_close(a[0].detach(), b[0].detach(), rtol=1e-7)


def test_compiled_step_equals_eager():
    """The functional step traces into one graph (a float lr is a tensor to avoid recompiles)."""
    torch._dynamo.reset()
    a = matrices((9, 14), (14, 9), seed=50)
    b = [nn.Parameter(p.detach().clone()) for p in a]
    set_grads(a, 51)
    set_grads(b, 51)

    def step(ps, gs, lr):
        sinkgd_update_(ps, gs, lr, 5, 0.0, 1e-8, foreach=False, backend="torch")

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        compiled(a, [p.grad for p in a], torch.tensor(0.01))
        step(b, [p.grad for p in b], torch.tensor(0.01))
    for x, y in zip(a, b):
        assert_close(x.detach(), y.detach(), rtol=1e-6)


def test_triton_backend_in_the_optimizer_matches_torch():
    a = matrices((13, 21), (13, 21), seed=60)
    b = [nn.Parameter(p.detach().clone()) for p in a]
    set_grads(a, 61)
    set_grads(b, 61)
    sinkgd.SinkGD(a, lr=0.1, backend="triton", foreach=True).step()
    sinkgd.SinkGD(b, lr=0.1, backend="torch").step()
    for x, y in zip(a, b):
        assert_close(x.detach() - 1, y.detach() - 1, rtol=1e-5)


def test_bad_input_raises_and_loses_nothing():
    w = nn.Parameter(torch.ones(3, 4))
    with pytest.raises(ValueError, match="lr"):
        sinkgd.SinkGD([w], lr=-1.0)
    with pytest.raises(ValueError, match="num_iters"):
        sinkgd.SinkGD([w], num_iters=0)
    with pytest.raises(ValueError, match="eps"):
        sinkgd.SinkGD([w], eps=0.0)
    with pytest.raises(ValueError, match="weight_decay"):
        sinkgd.SinkGD([w], weight_decay=-0.1)
    with pytest.raises(ValueError, match="backend"):
        sinkgd.SinkGD([w], backend="fast")
    with pytest.raises(ValueError, match=r"'bias'.*shape \(4,\)"):
        sinkgd.SinkGD([("weight", w), ("bias", nn.Parameter(torch.ones(4)))])
    with pytest.raises(ValueError, match="2-D"):
        sinkgd.SinkGD([nn.Parameter(torch.ones(2, 3, 4))])
    opt = sinkgd.SinkGD([w], lr=0.1)
    with pytest.raises(ValueError, match="2-D"):
        opt.add_param_group({"params": [nn.Parameter(torch.ones(5))]})
    with pytest.raises(ValueError, match="num_iters"):
        opt.add_param_group({"params": [nn.Parameter(torch.ones(5, 5))], "num_iters": -2})
    assert len(opt.param_groups) == 1  # the failed groups were not kept
    emb = nn.Embedding(10, 4, sparse=True)
    opt = sinkgd.SinkGD(emb.parameters(), lr=0.1)
    emb(torch.tensor([1, 2])).sum().backward()
    before = emb.weight.detach().clone()
    with pytest.raises(TypeError, match="sparse"):
        opt.step()
    assert torch.equal(before, emb.weight.detach())


# ----------------------------------------------------------------------------- routing and the hybrid


def test_param_groups_on_a_tiny_llama_route_exactly_the_expected_names():
    from neurips25_core.models import tiny_llama, tiny_llama_config

    model = tiny_llama(
        tiny_llama_config(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=48)
    )
    groups = sinkgd.param_groups(model)
    assert [g["use_sinkgd"] for g in groups] == [True, False]
    matrix_names, adam_names = groups[0]["param_names"], groups[1]["param_names"]
    expected_matrix = [
        f"model.layers.{i}.{m}"
        for i in range(2)
        for m in (
            "self_attn.q_proj.weight",
            "self_attn.k_proj.weight",
            "self_attn.v_proj.weight",
            "self_attn.o_proj.weight",
            "mlp.gate_proj.weight",
            "mlp.up_proj.weight",
            "mlp.down_proj.weight",
        )
    ]
    assert sorted(matrix_names) == sorted(expected_matrix)
    expected_adam = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"] + [
        f"model.layers.{i}.{n}"
        for i in range(2)
        for n in ("input_layernorm.weight", "post_attention_layernorm.weight")
    ]
    assert sorted(adam_names) == sorted(expected_adam)
    # tied embeddings appear once
    tied = tiny_llama(
        tiny_llama_config(hidden_size=32, num_layers=1, num_heads=4, tie_word_embeddings=True)
    )
    names = [n for g in sinkgd.param_groups(tied) for n in g["param_names"]]
    assert len(names) == len(set(names)) == len(list(tied.parameters()))


class _Head(nn.Module):
    """A model that names its output head only through ``get_output_embeddings`` (like transformers)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Embedding(11, 8), nn.Linear(8, 8, bias=False), nn.RMSNorm(8))
        self.score = nn.Linear(8, 11, bias=False)

    def get_output_embeddings(self):
        return self.score


class MyNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1, n))  # 2-D: only the module type can route it


def test_param_groups_route_by_module_type_not_by_name():
    # an embedding, a LayerNorm and a bias whose names say nothing: the regex alone sent them astray
    seq = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4), nn.LayerNorm(4), MyNorm(4))
    groups = sinkgd.param_groups(seq, adam_pattern=None)
    assert [(g["use_sinkgd"], g["param_names"]) for g in groups] == [
        (True, ["1.weight"]),
        (False, ["0.weight", "1.bias", "2.weight", "2.bias", "3.scale"]),
    ]
    default = [g["param_names"] for g in sinkgd.param_groups(seq)]  # the regex adds nothing here
    assert default == [g["param_names"] for g in groups]
    # the output head, found through get_output_embeddings, whatever its name
    names = [(g["use_sinkgd"], g["param_names"]) for g in sinkgd.param_groups(_Head(), None)]
    assert names == [
        (True, ["body.1.weight"]),
        (False, ["body.0.weight", "body.2.weight", "score.weight"]),
    ]
    # the name regex stays as an extra rule for matrices of plain Linear layers
    extra = nn.ModuleDict(
        {"proj": nn.Linear(4, 4, bias=False), "gate": nn.Linear(4, 4, bias=False)}
    )
    groups = sinkgd.param_groups(extra, adam_pattern="gate")
    assert [g["param_names"] for g in groups] == [["proj.weight"], ["gate.weight"]]
    # the optimizer built from a module uses the same routing: the embedding holds Adam state
    opt = sinkgd.SinkGDWithAdam(seq, lr=1e-2)
    seq[0](torch.tensor([1, 2])).sum().backward()
    opt.step()
    assert set(opt.state[seq[0].weight]) == {"step", "exp_avg", "exp_avg_sq"}
    with pytest.raises(ValueError, match="adam_pattern"):
        sinkgd.param_groups(seq, adam_pattern="(")
    with pytest.raises(TypeError, match="adam_pattern"):
        sinkgd.param_groups(seq, adam_pattern=3)


def test_hybrid_state_is_adam_only_and_matches_torch_adamw():
    model = TinyMLP()
    twin = copy.deepcopy(model)
    opt = sinkgd.SinkGDWithAdam(
        sinkgd.param_groups(model), lr=0.02, sinkgd_scale=0.05, weight_decay=0.01
    )
    adam_names = {"embed.weight", "up.bias", "norm.weight", "norm.bias", "lm_head.weight"}
    tw = dict(twin.named_parameters())
    torch_adam = torch.optim.AdamW([tw[n] for n in sorted(adam_names)], lr=0.02, weight_decay=0.01)
    twin_sinkgd = sinkgd.SinkGD([tw["up.weight"], tw["down.weight"]], lr=0.001, weight_decay=0.01)
    for step in range(3):
        opt.zero_grad()
        loss_of(model, step).backward()
        opt.step()
        twin.zero_grad()
        loss_of(twin, step).backward()
        torch_adam.step()
        twin_sinkgd.step()
    params = dict(model.named_parameters())
    for name, p in params.items():
        if name in adam_names:
            assert set(opt.state[p]) == {"step", "exp_avg", "exp_avg_sq"}
            assert_close(p.detach(), tw[name].detach(), rtol=1e-6, name=name)
        else:
            assert opt.state[p] == {}, name
    assert opt.param_groups[0]["lr"] == pytest.approx(0.001)
    state_elems = sum(v.numel() for st in opt.state.values() for v in st.values() if v.ndim > 0)
    assert state_elems == 2 * sum(params[n].numel() for n in adam_names)


def test_hybrid_state_dict_round_trip_and_model_argument():
    model = TinyMLP()
    twin = copy.deepcopy(model)
    opt = sinkgd.SinkGDWithAdam(model, lr=0.01)
    loss_of(model, 0).backward()
    opt.step()
    opt2 = sinkgd.SinkGDWithAdam(twin, lr=0.5)
    twin.load_state_dict(model.state_dict())
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    for m in (model, twin):
        m.zero_grad()
        loss_of(m, 1).backward()
    opt.step()
    opt2.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a, b)


def test_hybrid_group_checks():
    model = TinyMLP()
    groups = sinkgd.param_groups(model)
    with pytest.raises(ValueError, match="use_sinkgd"):
        sinkgd.SinkGDWithAdam([{"params": list(model.parameters())}])
    with pytest.raises(ValueError, match="betas"):
        sinkgd.SinkGDWithAdam([{**groups[0], "betas": (0.9, 0.9)}, groups[1]])
    with pytest.raises(ValueError, match="num_iters"):
        sinkgd.SinkGDWithAdam([groups[0], {**groups[1], "num_iters": 3}])
    with pytest.raises(ValueError, match="2-D"):
        sinkgd.SinkGDWithAdam([{**groups[1], "use_sinkgd": True}])
    with pytest.raises(ValueError, match="betas"):
        sinkgd.SinkGDWithAdam(groups, betas=(0.9, 1.5))
    user = [{**groups[0], "lr": 0.123}, groups[1]]
    opt = sinkgd.SinkGDWithAdam(user, lr=0.02)
    assert opt.param_groups[0]["lr"] == 0.123  # the group's own lr wins
    assert "num_iters" not in user[0]  # the user's dicts are not mutated


# ----------------------------------------------------------------------------- SWAN


def test_swan_grad_norm_and_whitening():
    from sinkgd.swan import grad_norm_torch, newton_schulz_polar

    g = (
        randn(24, 40, seed=70, dtype=torch.float64)
        * torch.linspace(0.1, 3, 24, dtype=torch.float64)[:, None]
        + 2
    )
    normed = grad_norm_torch(g)
    assert normed.mean(dim=1).abs().max() < 1e-12
    assert (normed.pow(2).mean(dim=1).sqrt() - 1).abs().max() < 1e-12
    assert_close(normed, reference.grad_norm(g), rtol=1e-12)
    polar = reference.polar_factor(normed)
    assert_close(newton_schulz_polar(normed, steps=40), polar, rtol=1e-8)
    assert_close(
        newton_schulz_polar(normed.T.contiguous(), steps=40), polar.T, rtol=1e-8
    )  # tall input
    # fp32, default steps: close to the polar factor on this well-conditioned matrix
    assert_close(newton_schulz_polar(normed.float(), steps=25), polar, rtol=1e-4)


def test_swan_optimizer_matches_the_svd_reference_and_is_stateless():
    params = matrices((16, 30), seed=80, dtype=torch.float64)
    set_grads(params, 81)
    w0 = params[0].detach().clone()
    g = params[0].grad.clone()
    opt = sinkgd.SWAN(params, lr=0.01, ns_steps=40)
    opt.step()
    assert_close(params[0].detach(), w0 - 0.01 * reference.swan_direction(g), rtol=1e-8)
    assert opt.state[params[0]] == {}
    with pytest.raises(ValueError, match="2-D"):
        sinkgd.SWAN([nn.Parameter(torch.ones(3))])
    with pytest.raises(ValueError, match="ns_steps"):
        sinkgd.SWAN(params, ns_steps=0)
    model = TinyMLP()
    opt = sinkgd.SWANWithAdam(sinkgd.param_groups(model, key="use_swan"), lr=0.01)
    loss_of(model).backward()
    opt.step()
    assert opt.state[model.up.weight] == {} and len(opt.state[model.embed.weight]) == 3


def test_optimizer_state_bytes_on_meta_models():
    with torch.device("meta"):
        model = TinyMLP()
    for p in model.parameters():
        p.grad = torch.empty_like(p)
    adam = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    adam.step()
    hybrid = sinkgd.SinkGDWithAdam(model, lr=1e-3)
    hybrid.step()
    total = sum(p.numel() for p in model.parameters())
    matrix = model.up.weight.numel() + model.down.weight.numel()
    assert sinkgd.optimizer_state_bytes(adam) == 2 * 4 * total + 4 * len(list(model.parameters()))
    assert sinkgd.optimizer_state_bytes(hybrid) == 2 * 4 * (total - matrix) + 4 * 5
    assert not math.isnan(float(total))
