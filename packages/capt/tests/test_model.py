"""The peft-style adapter on a tiny Llama built from a config (no downloads)."""

from __future__ import annotations

import pytest
import torch
from capt import CapsuleConfig, CapsuleModel, get_peft_model, instance_semantics

from neurips25_core.testing import assert_close


def _batch(seed=0, b=3, t=9, n_src=5):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 48, (b, t), generator=g)
    labels = ids.clone()
    labels[:, :n_src] = -100
    return ids, labels


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize(("layers", "k"), [("all", 1), ([0, 2], 2)])
def test_only_capsules_train_and_the_base_stays_bitwise(layers, k, tiny_llama):
    base = tiny_llama()
    before = _state(base)
    model = get_peft_model(base, CapsuleConfig(layers=layers, capsule_length=k))
    n_layers = 3 if layers == "all" else len(layers)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable == ["capsules"]
    assert model.get_nb_trainable_parameters()[0] == n_layers * k * 32
    opt = torch.optim.AdamW([model.capsules], lr=1e-2)
    ids, labels = _batch()
    for _ in range(5):
        opt.zero_grad()
        model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
    after = _state(base)
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert model.capsules.abs().sum() > 0


@pytest.mark.parametrize("source", ["embedding", "hidden", "none"])
def test_slot_entering_each_selected_layer(source, tiny_llama):
    base = tiny_llama()
    model = get_peft_model(
        base, CapsuleConfig(layers=[0, 2], instance_source=source, alpha=0.5, init="normal")
    )
    seen = {}
    for ell, layer in enumerate(base.model.layers):  # registered after ours: sees the written slot
        layer.register_forward_pre_hook(
            lambda m, a, kw, ell=ell: seen.__setitem__(
                ell, (a[0] if a else kw["hidden_states"]).clone()
            ),
            with_kwargs=True,
        )
    ids, labels = _batch()
    inst = (labels == -100).long()
    with torch.no_grad():
        model(input_ids=ids, labels=labels)
    for row, ell in enumerate([0, 2]):
        h_src = seen[ell][:, 1:]
        if source == "none":
            want = model.capsules[row][None].expand(3, -1, -1)
        else:
            src = (
                base.model.layers[ell].input_layernorm(h_src)
                if source == "hidden"
                else base.model.embed_tokens(ids)
            )
            want = model.capsules[row][None] + 0.5 * instance_semantics(src, inst)[:, None]
        assert_close(seen[ell][:, :1], want.to(seen[ell].dtype), rtol=1e-6)
    # Layer 1 is not selected: its slot is layer 0's output, not a capsule.
    assert not torch.allclose(seen[1][:, :1], seen[0][:, :1])


def test_targets_and_padding_do_not_reach_slot_0(tiny_llama):
    model = get_peft_model(tiny_llama(), CapsuleConfig(init="normal"))
    ids, labels = _batch(t=10, n_src=6)
    ids2 = ids.clone()
    ids2[:, 6:] = torch.randint(3, 48, (3, 4), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        a = model(input_ids=ids, labels=labels).logits
        b = model(input_ids=ids2, labels=torch.where(labels == -100, -100, ids2)).logits
    assert torch.equal(a[:, :7], b[:, :7])  # slot + 6 source positions
    assert not torch.equal(a, b)


def test_left_and_right_padding_agree(tiny_llama):
    model = get_peft_model(tiny_llama(), CapsuleConfig(init="normal"))
    ids, _ = _batch(b=2, t=8)
    lengths = [8, 5]
    right = torch.zeros(2, 8, dtype=torch.long)
    left = torch.zeros(2, 8, dtype=torch.long)
    mr, ml = torch.zeros_like(right), torch.zeros_like(left)
    for i, n in enumerate(lengths):
        right[i, :n], mr[i, :n] = ids[i, :n], 1
        left[i, 8 - n :], ml[i, 8 - n :] = ids[i, :n], 1
    with torch.no_grad():
        lr = model(input_ids=right, attention_mask=mr).logits
        ll = model(input_ids=left, attention_mask=ml).logits
    for i, n in enumerate(lengths):
        assert_close(ll[i, 9 - n :], lr[i, 1 : 1 + n], rtol=1e-5)
        assert_close(ll[i, :1], lr[i, :1], rtol=1e-5)


def test_kv_cache_generate_equals_full_recompute(tiny_llama, monkeypatch):
    import capt.model

    model = get_peft_model(tiny_llama(), CapsuleConfig(init="normal", init_std=0.5))
    ids, _ = _batch(b=2, t=7)
    writes, write = [], capt.model.write_slots
    monkeypatch.setattr(
        capt.model, "write_slots", lambda h, s: (writes.append(h.shape[1]), write(h, s))[1]
    )
    out = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert out.shape == (2, 15)
    assert writes == [8, 8, 8]  # the prefill pass of each of 3 layers only, never a decode step
    monkeypatch.undo()
    seq = ids
    inst = torch.ones_like(ids)  # the instance is the prompt, fixed while decoding
    with torch.no_grad():
        for _ in range(8):
            pad = torch.zeros(2, seq.shape[1] - 7, dtype=torch.long)
            logits = model(input_ids=seq, instance_mask=torch.cat([inst, pad], 1)).logits
            seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, seq)


def test_unload_restores_base_outputs_bitwise(tiny_llama):
    base = tiny_llama()
    ids, _ = _batch()
    with torch.no_grad():
        ref = base(input_ids=ids).logits
        model = get_peft_model(base, CapsuleConfig(init="normal"))
        model(input_ids=ids)
        restored = model.unload()
        assert torch.equal(restored(input_ids=ids).logits, ref)


def test_save_load_keeps_only_capsules_and_refuses_a_mismatch(tmp_path, tiny_llama):
    from safetensors.torch import load_file

    model = get_peft_model(tiny_llama(), CapsuleConfig(layers=[1, 2], init="normal"))
    ids, _ = _batch()
    model.save_pretrained(tmp_path)
    assert set(load_file(tmp_path / "adapter_model.safetensors")) == {"capsules"}
    loaded = CapsuleModel.from_pretrained(tiny_llama(), tmp_path)
    assert not loaded.capsules.requires_grad
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    with pytest.raises(ValueError, match="hidden_size"):
        CapsuleModel.from_pretrained(tiny_llama(hidden=16), tmp_path)
    with pytest.raises(ValueError, match="num_layers"):
        CapsuleModel.from_pretrained(tiny_llama(layers=2), tmp_path)
    from safetensors.torch import save_file

    save_file({"capsules": torch.zeros(3, 1, 32)}, tmp_path / "adapter_model.safetensors")
    with pytest.raises(ValueError, match="do not fit"):
        CapsuleModel.from_pretrained(tiny_llama(), tmp_path)


def test_bad_input(tiny_llama):
    with pytest.raises(ValueError, match="model: unsupported architecture"):
        get_peft_model(torch.nn.Linear(2, 2), CapsuleConfig())
    with pytest.raises(ValueError, match="layers: layer 3 out of range"):
        get_peft_model(tiny_llama(), CapsuleConfig(layers=[0, 3]))
    with pytest.raises(ValueError, match="capsule_length"):
        CapsuleConfig(capsule_length=0)
    with pytest.raises(ValueError, match="alpha"):
        CapsuleConfig(alpha=float("nan"))
    with pytest.raises(TypeError, match="config"):
        get_peft_model(tiny_llama(), {"layers": "all"})
    model = get_peft_model(tiny_llama(), CapsuleConfig())
    ids, _ = _batch()
    with pytest.raises(ValueError, match="instance_mask: expected the shape"):
        model(input_ids=ids, instance_mask=torch.ones(3, 4))
    zero = torch.ones_like(ids)
    zero[1] = 0
    with pytest.raises(ValueError, match="instance_mask"):
        model(input_ids=ids, instance_mask=zero)
    with pytest.raises(ValueError, match="instance_mask"):
        model(input_ids=ids, labels=ids)  # every token a target: no source left


def test_gradient_checkpointing_gives_the_same_loss_and_capsule_gradients(tiny_llama):
    # transformers 5 checkpoints a layer's ``forward``, so our pre-hook runs once, outside the replay.
    ids, labels = _batch()
    grads = []
    for checkpointing in (False, True):
        base = tiny_llama()
        if checkpointing:
            enable = getattr(base, "activation_checkpointing_enable", None)
            (enable or base.gradient_checkpointing_enable)()  # renamed in transformers 5.x
        base.train()
        model = get_peft_model(base, CapsuleConfig(instance_source="hidden", init="normal"))
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        grads.append((loss.detach(), model.capsules.grad.clone()))
    assert_close(grads[1][0], grads[0][0], rtol=1e-6)
    assert_close(grads[1][1], grads[0][1], rtol=1e-5)
    assert grads[0][1].abs().sum() > 0


class _CheckpointCall(torch.nn.Module):
    """A layer whose whole ``__call__`` (our pre-hook included) runs under ``checkpoint``."""

    def __init__(self, inner: torch.nn.Module, reentrant: bool) -> None:
        super().__init__()
        self.inner, self.reentrant = inner, reentrant

    def forward(self, *args, **kwargs):
        if self.reentrant:  # the reentrant variant takes no keyword arguments
            return torch.utils.checkpoint.checkpoint(
                lambda *a: self.inner(*a, **kwargs), *args, use_reentrant=True
            )
        return torch.utils.checkpoint.checkpoint(self.inner, *args, use_reentrant=False, **kwargs)


@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("source", ["embedding", "hidden"])
def test_checkpoint_around_the_layer_call_replays_the_hook(reentrant, source, tiny_llama):
    # The replay runs the pre-hook again during backward, after forward returned: it must write
    # the same slots (the last forward's state), or the recomputed layer differs silently.
    ids, labels = _batch()
    results = []
    for checkpointing in (False, True):
        base = tiny_llama().train()
        cfg = CapsuleConfig(layers=[0, 2], instance_source=source, init="normal", init_std=0.5)
        model = get_peft_model(base, cfg, generator=torch.Generator().manual_seed(0))
        if checkpointing:
            for i, layer in enumerate(base.model.layers):
                base.model.layers[i] = _CheckpointCall(layer, reentrant)
        # No KV cache: a replay would append to it twice (transformers' own checkpointing too).
        loss = model(input_ids=ids, labels=labels, use_cache=False).loss
        loss.backward()
        results.append((loss.detach(), model.capsules.grad.clone()))
    assert_close(results[1][0], results[0][0], rtol=1e-6)
    assert_close(results[1][1], results[0][1], rtol=1e-5)
    assert results[0][1].abs().sum() > 0


def test_init_vocab_samples_token_embeddings(tiny_llama):
    base = tiny_llama()
    cfg = CapsuleConfig(capsule_length=2, init="vocab")
    model = get_peft_model(base, cfg, generator=torch.Generator().manual_seed(0))
    table = base.model.embed_tokens.weight
    for p in model.capsules.detach().reshape(-1, table.shape[1]):
        assert bool((table == p).all(-1).any())  # every slot is exactly one token's embedding
    assert not torch.equal(model.capsules[0], model.capsules[1])
