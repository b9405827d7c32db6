import pytest
import torch
import torch.distributed as dist

from neurips25_core.distributed import run_distributed


def _ddp_step(rank, world_size, weight, inputs):
    from torch import nn

    model = nn.Linear(weight.shape[1], weight.shape[0], bias=False).double()
    with torch.no_grad():
        model.weight.copy_(weight)
    ddp = nn.parallel.DistributedDataParallel(model)
    shard = inputs.chunk(world_size)[rank]
    ddp(shard).pow(2).sum().backward()
    # DDP averages gradients over ranks: scale back to the sum over the union batch
    return model.weight.grad * world_size


def test_ddp_gradient_equals_the_single_process_one():
    weight = torch.randn(3, 5, dtype=torch.float64)
    inputs = torch.randn(6, 5, dtype=torch.float64)
    grads = run_distributed(_ddp_step, world_size=2, args=(weight, inputs))
    w = weight.clone().requires_grad_()
    (inputs @ w.T).pow(2).sum().backward()
    for g in grads:
        torch.testing.assert_close(g, w.grad, rtol=1e-12, atol=1e-12)


def test_a_failing_rank_is_reported_with_its_traceback():
    def boom(rank, world_size):
        if rank == 1:
            raise ValueError("rank one fails")
        dist.barrier()

    with pytest.raises(RuntimeError, match="rank one fails"):
        run_distributed(boom, world_size=2)


def test_bad_arguments():
    with pytest.raises(ValueError, match="world_size"):
        run_distributed(lambda r, w: None, world_size=0)
    with pytest.raises(TypeError, match="fn"):
        run_distributed(3)
