"""BCA fine-tuning under DDP (gloo, two CPU processes) equals one process on the whole batch."""

import pytest
from rdfft._distributed_check import _adapters, _model, run_ddp, single_process_reference


def _check(kind):
    ddp = run_ddp(2, kind)
    grads, adapters = single_process_reference(kind)
    assert len(ddp["grads"]) == len(grads) == 2
    for a, b in zip(ddp["grads"], grads):
        assert (a - b).abs().max().item() <= 1e-6
    for a, b in zip(ddp["adapters"], adapters):
        assert (a - b).abs().max().item() <= 1e-6
    # Not vacuous: the adapters moved away from their zero init.
    assert all(s.abs().max() == 0 for s in _adapters(_model(kind)))
    assert min(a.abs().max().item() for a in adapters) > 1e-4


def test_ddp_two_processes_equal_one():
    _check("mlp")


@pytest.mark.slow
def test_ddp_two_processes_equal_one_tiny_llama():
    _check("llama")
