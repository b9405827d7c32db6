"""SinkGD on FSDP2 / DTensor shards equals the unsharded step (two gloo processes on CPU)."""

import pytest
import torch
import torch.distributed as dist

from neurips25_core.testing import assert_close


@pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="needs torch.distributed with gloo",
)
def test_two_process_fsdp2_and_dtensor_steps_equal_the_single_process_step(tmp_path):
    from sinkgd._distributed_check import run_check, single_process_reference

    sharded = run_check(2, str(tmp_path / "out.pt"), str(tmp_path / "init"))
    single = single_process_reference()
    assert set(sharded) == {"fsdp", "shard0", "shard1"}
    for key in single:
        assert len(sharded[key]) == len(single[key])
        for i, (a, b) in enumerate(zip(sharded[key], single[key])):
            assert a.shape == b.shape
            assert not torch.equal(b, torch.zeros_like(b))
            assert_close(a, b, rtol=1e-6, name=f"{key}[{i}]")
