"""DDP (gloo, two CPU processes) equals one process on the union batch."""

from __future__ import annotations

import pytest
import torch

from neurips25_core.distributed import run_distributed

STEPS = 3


def _train(rank: int, world_size: int, distributed: bool, arch: str, build):
    from capt import CapsuleConfig, get_peft_model

    base = build(dtype=torch.float64).train()
    cfg = CapsuleConfig(instance_source="hidden", init="normal", init_std=0.5)
    model = get_peft_model(base, cfg, generator=torch.Generator().manual_seed(0))
    wrapped = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    init = model.capsules.detach().clone()
    opt = torch.optim.AdamW([model.capsules], lr=1e-2, eps=1e-12)
    gen = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        ids = torch.randint(3, 48, (4, 9), generator=gen)
        if arch == "llama":
            labels = ids.clone()
            labels[:, :6] = -100  # the same number of targets per row: equal per-rank token counts
        else:
            labels = torch.randint(3, 48, (4, 3), generator=gen)
        if distributed:
            ids, labels = ids.chunk(world_size)[rank], labels.chunk(world_size)[rank]
        loss = wrapped(input_ids=ids, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return init, model.capsules.detach().clone()


@pytest.mark.parametrize("arch", ["llama", pytest.param("t5", marks=pytest.mark.slow)])
def test_ddp_equals_single_process(arch, tiny_llama, tiny_t5):
    build = tiny_llama if arch == "llama" else tiny_t5  # forked ranks inherit it (no pickling)
    init, single = _train(0, 1, False, arch, build)
    assert (single - init).norm() > 1e-3 * init.norm()  # the capsules did train
    for _, capsules in run_distributed(_train, world_size=2, args=(True, arch, build)):
        err = (capsules - single).norm() / single.norm()
        assert err <= 1e-6, err
