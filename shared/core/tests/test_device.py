import torch

from neurips25_core import device


def test_best_device_matches_cuda_availability():
    assert device.best_device().type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert device.cuda_available() == torch.cuda.is_available()


def test_triton_flags(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert device.triton_interpret()
    assert device.triton_usable() == device.triton_available()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not device.triton_interpret()
    assert device.triton_usable() == (device.triton_available() and torch.cuda.is_available())


def test_auto_dispatch_uses_torch_for_cpu_tensors():
    assert not device.use_triton_for(torch.zeros(2))
