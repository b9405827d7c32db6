"""The capsule math against the float64 reference, forward and backward, on odd shapes."""

from __future__ import annotations

import pytest
import torch
from capt import capsule_forward, capsule_slots, instance_semantics, write_slots
from capt.reference import capsule_forward_reference, instance_semantics_reference

from neurips25_core.testing import assert_close, check_forward_backward, randn

D = 11


@pytest.mark.parametrize(("b", "t", "d"), [(1, 1, 5), (3, 7, 11), (2, 33, 13)])
def test_instance_semantics_matches_reference_forward_and_backward(b, t, d, make_masks):
    _, inst = make_masks(b, t, "right", seed=t)
    e = randn(b, t, d, seed=t, dtype=torch.float64, requires_grad=True)
    errors = check_forward_backward(
        instance_semantics,
        instance_semantics_reference,
        [e, inst],
        rtol=1e-12,
        names=["embeds", "mask"],
    )
    assert set(errors) == {"out0", "grad_embeds"}
    e32 = e.detach().float().requires_grad_(True)
    check_forward_backward(instance_semantics, instance_semantics_reference, [e32, inst], rtol=1e-5)


def test_instance_semantics_accumulates_bf16_in_float32():
    e = randn(2, 513, 8, seed=3, dtype=torch.float64)
    mask = torch.ones(2, 513, dtype=torch.bool)
    s = instance_semantics(e.bfloat16(), mask)
    assert s.dtype == torch.float32
    # The float32 mean of the bf16-rounded inputs, not a bf16 running sum.
    assert_close(s, instance_semantics_reference(e.bfloat16(), mask), rtol=1e-6)


def test_capsule_slots_add_and_concat():
    p = randn(2, D, seed=1, dtype=torch.float64)
    s = randn(3, D, seed=2, dtype=torch.float64)
    add = capsule_slots(p, s, alpha=0.5)
    assert add.shape == (3, 2, D)
    assert torch.equal(add[1, 0], p[0] + 0.5 * s[1])
    cat = capsule_slots(p, s, alpha=0.5, fusion="concat")
    assert cat.shape == (3, 3, D)
    assert torch.equal(cat[2, :2], p) and torch.equal(cat[2, 2], 0.5 * s[2])
    pre = capsule_slots(p, s, alpha=0.5, fusion="prepend")  # Finding II: [α s; p]
    assert pre.shape == (3, 3, D)
    assert torch.equal(pre[2, 0], 0.5 * s[2]) and torch.equal(pre[2, 1:], p)
    assert torch.equal(capsule_slots(p, None), p[None])


def test_write_slots_is_out_of_place_and_differentiable():
    h = randn(2, 5, D, seed=0, dtype=torch.float64, requires_grad=True)
    slots = randn(1, 2, D, seed=1, dtype=torch.float64, requires_grad=True)
    out = write_slots(h, slots)
    assert torch.equal(out[:, :2], slots.expand(2, -1, -1)) and torch.equal(out[:, 2:], h[:, 2:])
    out.sum().backward()
    assert torch.equal(h.grad[:, :2], torch.zeros(2, 2, D, dtype=torch.float64))
    assert torch.equal(slots.grad, torch.full((1, 2, D), 2.0, dtype=torch.float64))


CASES = [
    # (layer_ids of 3 layers, k, fusion, instance_source)
    ([0, 1, 2], 1, "add", "embedding"),
    ([1, 2], 2, "add", "embedding"),
    ([0, 2], 1, "concat", "embedding"),
    ([0], 2, "prepend", "embedding"),
    ([0, 1, 2], 1, "add", "hidden"),
    ([2], 1, "add", "hidden"),
    ([0, 1], 3, "add", "none"),
]


@pytest.mark.parametrize("t", [1, 7, 33])
@pytest.mark.parametrize("padding", ["left", "right"])
@pytest.mark.parametrize(("layer_ids", "k", "fusion", "source"), CASES)
def test_capsule_forward_matches_reference(
    t, padding, layer_ids, k, fusion, source, toy_stack, make_masks
):
    layers, norms = toy_stack(3, D)
    attn, inst = make_masks(3, t, padding, seed=t)
    e = randn(3, t, D, seed=t + 1, dtype=torch.float64, requires_grad=True)
    p = (0.3 * randn(len(layer_ids), k, D, seed=t + 2, dtype=torch.float64)).requires_grad_(True)

    def run(fn):
        def f(embeds, prompts):
            h, entering = fn(
                embeds, inst, attn, layers, prompts, layer_ids, 0.7, fusion, source, norms
            )
            return h * attn_ext[..., None], [x * attn_ext[..., None] for x in entering]

        return f

    kk = k + (fusion != "add")
    attn_ext = torch.cat([torch.ones(3, kk, dtype=torch.long), attn], 1)
    # Padded positions are compared too, but zeroed: their content is not part of the contract.
    errors = check_forward_backward(
        run(capsule_forward),
        run(capsule_forward_reference),
        [e, p],
        rtol=1e-10,
        names=["embeds", "prompts"],
    )
    assert {"out0", "grad_embeds", "grad_prompts"} <= set(errors)
    e32, p32 = (x.detach().float().requires_grad_(True) for x in (e, p))
    check_forward_backward(
        run(capsule_forward), run(capsule_forward_reference), [e32, p32], rtol=1e-5
    )


@pytest.mark.parametrize("source", ["embedding", "hidden"])
def test_slot_content_entering_each_selected_layer(source, toy_stack, make_masks):
    layers, norms = toy_stack(4, D)
    attn, inst = make_masks(3, 9, "right")
    e = randn(3, 9, D, seed=5, dtype=torch.float64)
    p = randn(2, 2, D, seed=6, dtype=torch.float64)
    ids = [1, 3]
    _, entering = capsule_forward(e, inst, attn, layers, p, ids, 0.5, "add", source, norms)
    for row, ell in enumerate(ids):
        src = entering[ell][:, 2:]
        s = instance_semantics(norms[ell](src) if source == "hidden" else e, inst)
        assert_close(entering[ell][:, :2], p[row][None] + 0.5 * s[:, None], rtol=1e-14)
    # Unselected layers see exactly the previous layer's output.
    attn_ext = torch.cat([torch.ones(3, 2, dtype=torch.long), attn], 1)
    assert torch.equal(entering[2], layers[1](entering[1], attn_ext))
    assert torch.equal(entering[1][:, 2:], layers[0](entering[0], attn_ext)[:, 2:])


def test_targets_and_padding_do_not_leak_into_the_capsule(toy_stack, make_masks):
    layers, _ = toy_stack(3, D)
    attn, inst = make_masks(3, 12, "right")
    e = randn(3, 12, D, seed=7, dtype=torch.float64)
    p = randn(3, 1, D, seed=8, dtype=torch.float64)
    h, _ = capsule_forward(e, inst, attn, layers, p, [0, 1, 2])
    e2 = e.clone()
    e2[~inst.bool()] = randn(int((inst == 0).sum()), D, seed=9, dtype=torch.float64)
    h2, _ = capsule_forward(e2, inst, attn, layers, p, [0, 1, 2])
    assert torch.equal(instance_semantics(e, inst), instance_semantics(e2, inst))
    src = torch.cat([torch.ones(3, 1, dtype=torch.bool), inst.bool()], 1)
    assert torch.equal(h[src], h2[src])  # slot and every source position unchanged
    assert not torch.equal(h, h2)


def test_left_and_right_padding_agree_on_real_tokens(toy_stack, make_masks):
    layers, _ = toy_stack(2, D)
    attn_r, inst_r = make_masks(4, 10, "right", seed=3)
    attn_l, inst_l = make_masks(4, 10, "left", seed=3)
    e_r = randn(4, 10, D, seed=1, dtype=torch.float32)
    e_l = torch.zeros_like(e_r)
    for b in range(4):
        n = int(attn_r[b].sum())
        e_l[b, 10 - n :] = e_r[b, :n]
    p = randn(2, 1, D, seed=2, dtype=torch.float32)
    h_r, _ = capsule_forward(e_r, inst_r, attn_r, layers, p, [0, 1])
    h_l, _ = capsule_forward(e_l, inst_l, attn_l, layers, p, [0, 1])
    for b in range(4):
        n = int(attn_r[b].sum())
        assert_close(h_l[b, 11 - n :], h_r[b, 1 : 1 + n], rtol=1e-5)
        assert_close(h_l[b, :1], h_r[b, :1], rtol=1e-5)


def test_reductions(toy_stack, make_masks):
    layers, _ = toy_stack(3, D)
    attn, inst = make_masks(2, 6, "right")
    e = randn(2, 6, D, seed=1, dtype=torch.float64)
    p = randn(3, 4, D, seed=2, dtype=torch.float64)
    # alpha = 0 is deep prompt tuning with k = n slots (instance_source="none").
    a, _ = capsule_forward(e, inst, attn, layers, p, [0, 1, 2], alpha=0.0)
    b, _ = capsule_forward(e, inst, attn, layers, p, [0, 1, 2], instance_source="none")
    assert torch.equal(a, b)
    # deep=False is layer_ids=[0]: the slot written once, before layer 0.
    _, entering = capsule_forward(e, inst, attn, layers, p[:1], [0])
    assert_close(entering[0][:, :4], p[0][None] + instance_semantics(e, inst)[:, None], rtol=1e-15)
    assert not torch.equal(entering[1][:, :4], entering[0][:, :4])
