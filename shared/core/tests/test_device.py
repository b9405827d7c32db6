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


def test_kernel_buffer_is_poisoned_only_under_the_interpreter(monkeypatch):
    import torch

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    b = device.kernel_buffer(3, 5)
    assert b.shape == (3, 5) and b.dtype == torch.float32 and torch.isnan(b).all()
    i = device.kernel_buffer(4, dtype=torch.int32)
    assert (i == torch.iinfo(torch.int32).min).all()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    e = device.kernel_buffer(2, 7, dtype=torch.float64)
    assert e.shape == (2, 7) and e.dtype == torch.float64
