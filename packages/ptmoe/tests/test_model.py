"""The peft-style adapter on a tiny LlamaForCausalLM built from a config (no downloads)."""

from __future__ import annotations

import json
import os

import pytest
import torch
from ptmoe import PTMoEConfig, PTMoEModel, get_peft_model

from neurips25_core.testing import assert_close

VOCAB = 48


def _cfg(**kw):
    base = {"prompt_length": 5, "num_experts": 3, "rank": 4, "init_jitter": 0.1}
    base.update(kw)
    return PTMoEConfig(**base)


def test_only_the_prompt_is_trainable_and_the_base_is_bitwise_unchanged(tiny_llama, make_batch):
    base = tiny_llama()
    before = {k: v.clone() for k, v in base.state_dict().items()}
    model = get_peft_model(base, _cfg())
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {
        "prompt_encoder.A",
        "prompt_encoder.B",
        "prompt_encoder.router.weight",
        "prompt_encoder.router.bias",
    }
    assert model.get_nb_trainable_parameters()[0] == _cfg().num_parameters(32)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids, labels = make_batch()
    start = model.prompt_encoder.A.detach().clone()
    for _ in range(3):
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert not torch.equal(model.prompt_encoder.A, start)
    after = model.unload().state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert model.unload() is base


def test_prepend_labels_and_loss(tiny_llama, make_batch):
    model = get_peft_model(tiny_llama(), _cfg()).eval()
    ids, labels = make_batch()
    out = model(input_ids=ids, labels=labels)
    assert out.logits.shape == (3, 5 + 9, VOCAB)
    # The loss is the base's own shifted cross-entropy on [-100]*T + labels.
    full_labels = torch.cat([torch.full((3, 5), -100), labels], 1)
    ref = torch.nn.functional.cross_entropy(
        out.logits[:, :-1].reshape(-1, VOCAB), full_labels[:, 1:].reshape(-1), ignore_index=-100
    )
    assert_close(out.loss, ref, rtol=1e-6)


def test_default_source_mask_keeps_answers_out_of_the_router(tiny_llama, make_batch):
    model = get_peft_model(tiny_llama(), _cfg(num_experts=4)).eval()
    ids, labels = make_batch()
    model(input_ids=ids, labels=labels)
    ref = model.last_routing
    ids2 = ids.clone()
    ids2[:, 5:] = (ids2[:, 5:] + 7) % (VOCAB - 3) + 3
    labels2 = ids2.clone()
    labels2[:, :5] = -100
    model(input_ids=ids2, labels=labels2)
    assert torch.equal(model.last_routing.logits, ref.logits)
    # Without labels the whole (unpadded) input is the source, so the routing moves.
    model(input_ids=ids2)
    assert not torch.equal(model.last_routing.logits, ref.logits)


def test_left_and_right_padding_agree(tiny_llama):
    model = get_peft_model(tiny_llama(), _cfg()).eval()
    ids = torch.tensor([[5, 9, 12, 7, 30, 4]])
    ref = model(input_ids=ids).logits[0, 5:]
    pad = torch.zeros(1, 3, dtype=torch.long)
    ones, zeros = torch.ones(1, 6, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long)
    right = model(input_ids=torch.cat([ids, pad], 1), attention_mask=torch.cat([ones, zeros], 1))
    left = model(input_ids=torch.cat([pad, ids], 1), attention_mask=torch.cat([zeros, ones], 1))
    assert_close(right.logits[0, 5:11], ref, rtol=1e-5)
    assert_close(left.logits[0, 8:], ref, rtol=1e-5)


def test_kv_cache_generate_equals_full_recompute(tiny_llama):
    model = get_peft_model(tiny_llama(), _cfg()).eval()
    ids = torch.tensor([[5, 9, 12, 7], [3, 8, 40, 22]])
    out = model.generate(input_ids=ids, max_new_tokens=8, do_sample=False, min_new_tokens=8)
    assert out.shape == (2, 12)
    seq = ids
    source = torch.ones_like(ids)
    with torch.no_grad():
        for _ in range(8):
            # The router sees the original prompt only, as in generate.
            mask = torch.cat([source, torch.zeros(2, seq.shape[1] - 4, dtype=torch.long)], 1)
            logits = model(input_ids=seq, source_mask=mask).logits[:, -1]
            logits[:, 2] = -torch.inf  # min_new_tokens=8 bars EOS (id 2) in generate as well
            seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, seq)


def test_save_holds_only_adapter_tensors_and_reloads_identically(tmp_path, tiny_llama, make_batch):
    model = get_peft_model(tiny_llama(), _cfg())
    with torch.no_grad():
        model.prompt_encoder.A.add_(0.05)  # differ from any fresh init
    model.save_pretrained(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["adapter_config.json", "adapter_model.safetensors"]
    from safetensors.torch import load_file

    saved = load_file(tmp_path / "adapter_model.safetensors")
    assert set(saved) == {"A", "B", "router.weight", "router.bias"}
    assert json.loads((tmp_path / "adapter_config.json").read_text())["token_dim"] == 32
    model.eval()
    ids, labels = make_batch()
    ref = model(input_ids=ids, labels=labels).logits
    loaded = PTMoEModel.from_pretrained(tiny_llama(), tmp_path)
    assert not loaded.training
    assert not any(p.requires_grad for p in loaded.parameters())
    assert torch.equal(loaded(input_ids=ids, labels=labels).logits, ref)
    trainable = PTMoEModel.from_pretrained(tiny_llama(), tmp_path, is_trainable=True)
    assert trainable.get_nb_trainable_parameters()[0] == _cfg().num_parameters(32)


def test_mismatched_checkpoints_are_refused(tmp_path, tiny_llama):
    get_peft_model(tiny_llama(), _cfg()).save_pretrained(tmp_path)
    with pytest.raises(
        ValueError,
        match=r"model: the adapter .* was saved for hidden size 32, the base model has 24",
    ):
        PTMoEModel.from_pretrained(tiny_llama(hidden=24), tmp_path)
    # A config edited to another rank no longer fits the saved tensors.
    data = json.loads((tmp_path / "adapter_config.json").read_text())
    data["rank"] = 3
    (tmp_path / "adapter_config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="model_id: tensor 'A' has shape"):
        PTMoEModel.from_pretrained(tiny_llama(), tmp_path)
    data["peft_type"] = "PROMPT_TUNING"
    (tmp_path / "adapter_config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"directory: .* holds a 'PROMPT_TUNING' adapter"):
        PTMoEModel.from_pretrained(tiny_llama(), tmp_path)
    with pytest.raises(ValueError, match=r"directory: no adapter_config\.json"):
        PTMoEModel.from_pretrained(tiny_llama(), tmp_path / "missing")


def test_print_trainable_parameters_and_routing_stats(capsys, tiny_llama, make_batch):
    model = get_peft_model(tiny_llama(), _cfg(num_experts=2, rank=3)).eval()
    model.print_trainable_parameters()
    n = _cfg(num_experts=2, rank=3).num_parameters(32)
    assert capsys.readouterr().out.startswith(f"trainable params: {n:,d} || all params: ")
    ids, labels = make_batch(batch=4)
    model(input_ids=ids, labels=labels, domains=["a", "a", "b", "b"])
    stats = model.routing_stats(reset=True)
    assert stats["examples"] == 4 and sum(stats["top1"]) == 4
    assert sum(map(sum, stats["histogram"].values())) == 4 and set(stats["histogram"]) == {"a", "b"}
    assert 0 <= stats["entropy"] <= torch.log(torch.tensor(2.0)).item() + 1e-12
    assert_close(
        torch.tensor(stats["load"]).sum(),
        model.last_routing.weights.sum(1).mean().double(),
        rtol=1e-12,
    )
    assert model.routing_stats()["examples"] == 0


def test_adapter_bad_input(tiny_llama, make_batch):
    model = get_peft_model(tiny_llama(), _cfg())
    ids, labels = make_batch()
    with pytest.raises(ValueError, match=r"source_mask: expected the shape of input_ids \(3, 9\)"):
        model(input_ids=ids, labels=labels, source_mask=torch.ones(3, 8))
    with pytest.raises(ValueError, match="attention_mask: expected the shape of input_ids"):
        model(input_ids=ids, attention_mask=torch.ones(2, 9))
    with pytest.raises(ValueError, match="domains: expected 3 labels"):
        model(input_ids=ids, domains=["a"])
    with pytest.raises(ValueError, match="tokenizer: init_text needs a tokenizer"):
        get_peft_model(tiny_llama(), _cfg(init_text="answer the question"))
    with pytest.raises(ValueError, match="model: the config is for hidden size token_dim=16"):
        get_peft_model(tiny_llama(), _cfg(token_dim=16))
    with pytest.raises(TypeError, match="config: expected a PTMoEConfig"):
        get_peft_model(tiny_llama(), {"prompt_length": 4})


def test_init_text_through_a_tokenizer(tiny_llama):
    def tokenizer(text):  # a byte tokenizer with the call convention of transformers'
        return {"input_ids": [3 + (b % (VOCAB - 3)) for b in text.encode()]}

    base = tiny_llama()
    model = get_peft_model(base, _cfg(init_text="qa", init_jitter=0.0, rank=5), tokenizer=tokenizer)
    ids = torch.tensor(tokenizer("qa")["input_ids"] * 3)[:5]
    E = base.get_input_embeddings().weight[ids].detach()
    assert_close(model.prompt_encoder.A[0] @ model.prompt_encoder.B, E, rtol=1e-5)


def test_matches_peft_prompt_tuning_with_the_same_prompt(tiny_llama, make_batch):
    peft = pytest.importorskip("peft", reason="peft (the `peers` extra) is not installed")
    base = tiny_llama()
    # N = 1 uniform, R = T: the prompt is A B, set to a known matrix.
    ours = get_peft_model(
        base, _cfg(num_experts=1, routing="uniform", rank=5, init_jitter=0.0)
    ).eval()
    theirs = peft.get_peft_model(
        tiny_llama(), peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=5)
    ).eval()
    prompt = ours.prompt_encoder.A[0] @ ours.prompt_encoder.B
    with torch.no_grad():
        theirs.prompt_encoder["default"].embedding.weight.copy_(prompt)
    ids, labels = make_batch()
    a = ours(input_ids=ids, labels=labels)
    b = theirs(input_ids=ids, labels=labels)
    assert_close(a.logits, b.logits, rtol=1e-6)
    assert_close(a.loss, b.loss, rtol=1e-6)


def test_left_padded_generate_equals_unpadded(tiny_llama):
    model = get_peft_model(tiny_llama(), _cfg()).eval()
    kw = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False}
    ref = model.generate(input_ids=torch.tensor([[5, 9, 12, 7]]), **kw)
    out = model.generate(
        input_ids=torch.tensor([[0, 0, 5, 9, 12, 7]]),
        attention_mask=torch.tensor([[0, 0, 1, 1, 1, 1]]),
        **kw,
    )
    assert torch.equal(out[:, 2:], ref)
