"""NBL on transformers decoders: calibration, apply, generate with cache, save/load, errors."""

import nbl
import pytest
import torch
from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

from neurips25_core.models import tiny_llama, tiny_llama_config
from neurips25_core.testing import randint

KW = dict(
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=64,
    vocab_size=256,
    max_position_embeddings=128,
)


def _llama(seed=0):
    cfg = tiny_llama_config(
        hidden_size=32,
        num_layers=3,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    return tiny_llama(cfg, seed=seed).eval()


MODELS = {
    "llama": _llama,
    "mistral": lambda: MistralForCausalLM(MistralConfig(**KW, sliding_window=None)).eval(),
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**KW)).eval(),
}


def _ids(b=6, t=40, seed=0):
    return randint(0, 256, b, t, seed=seed)


def test_layer_mse_after_apply_equals_prediction():
    torch.manual_seed(0)
    model = _llama().double()
    ids = _ids()
    st = nbl.calibrate(model, ids, batch_size=4)
    rep = nbl.layer_reports(st)
    layer = 1
    # record the original input h and the new attention output at layer 1 (earlier layers intact)
    got = {}
    dec = model.model.layers[layer]
    h1 = dec.input_layernorm.register_forward_pre_hook(lambda m, a: got.__setitem__("h", a[0]))
    h2 = dec.self_attn.register_forward_hook(lambda m, a, o: got.__setitem__("y", o[0]))
    with torch.no_grad():
        model(ids)
    h1.remove()
    h2.remove()
    nbl.apply(model, [layer], st)
    with torch.no_grad():
        pred = model.model.layers[layer].self_attn(got["h"])[0]
    n = ids.numel()
    emp = float(((got["y"] - pred) ** 2).sum(-1).mean()) * n / (n - 1)
    assert abs(emp - rep[layer]["mse"]) < 1e-8 * rep[layer]["mse"]
    assert rep[layer]["mse"] <= rep[layer]["bound_lmax"] <= rep[layer]["bound_trace"]


def test_padding_is_excluded():
    model = _llama()
    ids = _ids(4, 30)
    mask = torch.ones_like(ids)
    mask[0, :10] = 0  # left padding
    st = nbl.calibrate(model, ids, attention_mask=mask)
    assert st[0].stats.n == ids.numel() - 10


@pytest.mark.parametrize("arch", sorted(MODELS))
@pytest.mark.parametrize("layers", [[0], [0, 2]])
def test_generate_with_cache_equals_recompute(arch, layers):
    torch.manual_seed(0)
    model = MODELS[arch]().double()
    nbl.apply(model, layers, nbl.calibrate(model, _ids(6, 24)))
    prompt = _ids(2, 7, seed=3)
    with torch.no_grad():
        out = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=8,
            do_sample=False,
            use_cache=True,
            pad_token_id=0,
        )
        seq = prompt
        for _ in range(8):
            nxt = model(seq, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], 1)
    assert torch.equal(out, seq)


def test_drop_generate_and_zero_output():
    model = _llama()
    nbl.apply_drop(model, [0])
    prompt = _ids(1, 5)
    with torch.no_grad():
        out = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=5,
            do_sample=False,
            pad_token_id=0,
        )
        seq = prompt
        for _ in range(5):
            seq = torch.cat([seq, model(seq).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, seq)
    h = torch.randn(1, 3, 32)
    assert torch.equal(model.model.layers[0].self_attn(h)[0], torch.zeros_like(h))


def test_selection_criteria():
    reps = [
        {"layer": i, "score": s, "mse": m, "cosine": c}
        for i, (s, m, c) in enumerate([(3, 1, 0.9), (1, 2, 0.5), (2, 3, 0.99)])
    ]
    assert nbl.select(reps, 2, "cca") == [1, 2]
    assert nbl.select(reps, 2, "mse") == [0, 1]
    assert nbl.select(reps, 2, "cosine") == [2, 0]
    assert nbl.select(reps, 3, "random", seed=1) == nbl.select(reps, 3, "random", seed=1)
    assert sorted(nbl.select(reps, 3, "random", seed=4)) == [0, 1, 2]
    with pytest.raises(ValueError, match="k: expected"):
        nbl.select(reps, 4)
    with pytest.raises(ValueError, match="criterion"):
        nbl.select(reps, 1, "foo")


def test_save_load_roundtrip_and_refusal(tmp_path):
    model = _llama()
    ids = _ids()
    nbl.apply(model, [1], nbl.calibrate(model, ids))
    nbl.apply_drop(model, [2])
    path = nbl.save(model, tmp_path / "nbl.pt")
    fresh = _llama(seed=5)
    nbl.load(fresh, path)
    with torch.no_grad():
        assert torch.equal(fresh(ids).logits, model(ids).logits)
    other = tiny_llama(
        tiny_llama_config(
            hidden_size=32,
            num_layers=4,
            num_heads=4,
            num_kv_heads=2,
            intermediate_size=64,
            max_position_embeddings=128,
        )
    )
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(ValueError, match="does not match"):
        nbl.load(other, path)
    assert all(torch.equal(before[k], v) for k, v in other.state_dict().items())


def test_sequential_ablation_runs_and_differs_in_stats():
    model = _llama()
    chosen = nbl.linearize(model, _ids(), k=2, sequential=True)
    assert len(set(chosen)) == 2
    assert sum(isinstance(m.self_attn, nbl.LinearizedAttention) for m in model.model.layers) == 2


def test_removed_parameters_mistral7b():
    cfg = MistralConfig(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=32000,
    )
    removed, total = nbl.removed_parameters(cfg, list(range(8)))
    d, dkv = 4096, 1024
    assert removed == 8 * (2 * d * d + 2 * d * dkv + d - d * d - d)
    assert abs(removed / total - 0.028) < 0.001


def test_bad_inputs():
    model = _llama()
    with pytest.raises(TypeError, match="model: expected"):
        nbl.calibrate(torch.nn.Linear(2, 2), _ids())
    with pytest.raises(ValueError, match="input_ids: expected a 2-D integer"):
        nbl.calibrate(model, _ids().float())
    with pytest.raises(ValueError, match="input_ids: expected a 2-D integer"):
        nbl.calibrate(model, _ids()[0])
    with pytest.raises(ValueError, match="input_point"):
        nbl.calibrate(model, _ids(), input_point="post")
    st = nbl.calibrate(model, _ids())
    with pytest.raises(ValueError, match="layers: duplicate"):
        nbl.apply(model, [1, 1], st)
    with pytest.raises(ValueError, match="out of range"):
        nbl.apply(model, [3], st)
    with pytest.raises(ValueError, match="k: expected"):
        nbl.linearize(model, _ids(), k=4)
    small = nbl.calibrate(model, _ids(1, 20))  # 20 tokens < d = 32
    with pytest.raises(ValueError, match="C_xx singular"):
        nbl.apply(model, [0], small)
    assert not any(isinstance(m.self_attn, nbl.LinearizedAttention) for m in model.model.layers)


@pytest.mark.parametrize("arch", sorted(MODELS))
def test_manual_cache_decode_with_layer0_linearized(arch):
    """A hand-driven decode (``past_key_values`` only, no positions): transformers derives the
    positions from layer 0's cache length, which the placeholder K/V keeps right."""
    torch.manual_seed(0)
    model = MODELS[arch]().double()
    nbl.apply(model, [0], nbl.calibrate(model, _ids(6, 24)))
    seq = _ids(2, 9, seed=4)
    with torch.no_grad():
        out = model(seq[:, :6], use_cache=True)
        cache = out.past_key_values
        steps = []
        for t in range(6, 9):
            o = model(seq[:, t : t + 1], past_key_values=cache, use_cache=True)
            cache = o.past_key_values
            steps.append(o.logits[:, -1])
        full = model(seq, use_cache=False).logits[:, 6:9]
    assert cache.get_seq_length() == 9
    torch.testing.assert_close(torch.stack(steps, 1), full, rtol=1e-10, atol=1e-10)
