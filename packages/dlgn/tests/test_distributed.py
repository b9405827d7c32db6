"""DDP with gloo in two CPU processes equals single-process training on the union batch (item 6)."""

from __future__ import annotations

from neurips25_core.testing import assert_close


def test_ddp_two_processes_equal_one():
    from dlgn._distributed_check import _net, run_check, single_process_reference

    ranks = run_check(2)
    assert len(ranks) == 2
    for rank in ranks:
        assert set(rank) == {"gumbel", "softmax"}
    for mode in ("gumbel", "softmax"):
        ref = single_process_reference(mode)
        for params in (r[mode] for r in ranks):  # every rank holds the same (reference) net
            assert len(params) == len(ref)
            for p, r in zip(params, ref):
                assert (p - r).abs().max().item() <= 1e-6, mode
                assert_close(p, r, rtol=1e-10)
        # Not vacuous: training moved the logits.
        start = [q.detach() for q in _net(mode).parameters()]
        assert max((p - s).abs().max().item() for p, s in zip(ref, start)) > 1e-2
