"""DDP (gloo, two CPU processes) equals one process on the union batch, hooks and groups included."""

import pytest
import torch

from neurips25_core.distributed import run_distributed

STEPS = 5


def _train(rank: int, world_size: int, distributed: bool, fsdp: bool = False):
    from completep import ParamConfig, param_groups, parameterize
    from transformers import LlamaForCausalLM

    from neurips25_core.models import tiny_llama_config

    config = tiny_llama_config(hidden_size=32, num_layers=4, num_heads=2, intermediate_size=64)
    cfg = ParamConfig(kind="completep", base_width=16, base_depth=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).double()
    parameterize(model, cfg, generator=torch.Generator().manual_seed(0))
    if fsdp:
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    # groups after fully_shard: they then hold the sharded DTensor parameters
    opt = torch.optim.AdamW(param_groups(model, cfg, lr=1e-2, eps=1e-12), betas=(0.9, 0.95))
    if distributed and not fsdp:
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
    else:
        wrapped = model
    gen = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        ids = torch.randint(0, 256, (4, 12), generator=gen)
        if distributed:
            ids = ids.chunk(world_size)[rank]
        loss = wrapped(ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    state = model.state_dict()
    return {
        k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
        for k, v in state.items()
    }


@pytest.mark.slow
def test_ddp_equals_single_process():
    single = _train(0, 1, distributed=False)
    ranks = run_distributed(_train, world_size=2, args=(True,))
    for name, ref in single.items():
        for state in ranks:
            err = (state[name] - ref).norm() / ref.norm().clamp_min(1e-30)
            assert err <= 1e-6, name


@pytest.mark.slow
def test_fsdp2_equals_single_process():
    single = _train(0, 1, distributed=False)
    ranks = run_distributed(_train, world_size=2, args=(True, True))
    for name, ref in single.items():
        for state in ranks:
            err = (state[name] - ref).norm() / ref.norm().clamp_min(1e-30)
            assert err <= 1e-6, name
