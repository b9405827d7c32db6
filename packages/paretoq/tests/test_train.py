"""train_qat (the QAT entry point on the core loop) and ``python -m paretoq.train``."""

from __future__ import annotations

import paretoq
import pytest
import torch
from paretoq.train import default_lr, main, train_qat

from neurips25_core.models import tiny_llama, tiny_llama_config
from neurips25_core.testing import randint


def _model(seed=0):
    config = tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=48)
    return tiny_llama(config, seed=seed)


def _data():
    ids = randint(0, 256, 4, 33, seed=0)
    return lambda step: (ids[:, :-1], ids[:, 1:])


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode])
def test_train_qat_trains_inside_no_grad(context):
    model, data = _model(), _data()
    with context():
        res = train_qat(model, data, 2, steps=25, lr=3e-3, progress=False)
    layers = [m for m in model.modules() if isinstance(m, paretoq.QuantLinear)]
    assert len(layers) == 7 and {m.bits for m in layers} == {2}
    ref = paretoq.quantize_(_model(), 2)
    assert all(
        not torch.equal(m.alpha, r.alpha) and not torch.equal(m.weight, r.weight)
        for m, r in zip(layers, (m for m in ref.modules() if isinstance(m, paretoq.QuantLinear)))
    )
    assert sum(res.losses[-5:]) < sum(res.losses[:5])
    # the official recipe: no warm-up, cosine to 0
    assert res.lrs[0] == pytest.approx(3e-3) and res.lrs[-1] < 3e-3 * 0.01


def test_train_qat_reuses_an_already_quantized_model_and_checks_it():
    model = paretoq.quantize_(_model(), 1.58)
    layer = model.model.layers[0].mlp.up_proj
    train_qat(model, _data(), 1.58, steps=2, progress=False)
    assert model.model.layers[0].mlp.up_proj is layer  # trained in place, not re-quantized
    with pytest.raises(ValueError, match=r"bits=\[1\.58\], not bits=2"):
        train_qat(model, _data(), 2, steps=1, progress=False)
    paretoq.pack_(model)
    with pytest.raises(ValueError, match="PackedLinear"):
        train_qat(model, _data(), 1.58, steps=1, progress=False)
    with pytest.raises(ValueError, match="lr"):
        train_qat(_model(), _data(), 2, steps=1, lr=float("nan"), progress=False)
    with pytest.raises(ValueError, match="bits"):
        train_qat(_model(), _data(), 5, steps=1, progress=False)
    assert default_lr(2) == 2 * default_lr(4)


def test_command_line_trains_packs_and_saves(tmp_path, capsys):
    out = tmp_path / "qat.pt"
    assert main(["--bits", "2", "--steps", "3", "--toy", "--batch-size", "2", "--seq-len", "32",
                 "--eval-batches", "1", "--no-progress", "--out", str(out)]) == 0  # fmt: skip
    assert '"packed_bpb"' in capsys.readouterr().out
    blob = torch.load(out, weights_only=True)
    assert blob["bits"] == 2 and blob["steps"] == 3
    from transformers import LlamaConfig

    config = LlamaConfig.from_dict(blob["config"])
    fresh = paretoq.pack_(paretoq.quantize_(tiny_llama(config), 2))
    fresh.load_state_dict(blob["state_dict"])  # strict: it fits a 2-bit packed model
    ternary = paretoq.pack_(paretoq.quantize_(tiny_llama(config), 1.58))
    with pytest.raises(ValueError, match="2-bit weights"):
        ternary.load_state_dict(blob["state_dict"])
