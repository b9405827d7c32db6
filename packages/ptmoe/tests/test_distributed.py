"""PT-MoE under DDP in two gloo processes equals one process on the union batch (noise off)."""

from __future__ import annotations

import torch
from ptmoe import PTMoEConfig, get_peft_model

from neurips25_core.distributed import run_distributed
from neurips25_core.testing import assert_close

CFG = PTMoEConfig(prompt_length=5, num_experts=3, rank=4, init_jitter=0.1, router_noise=0.0)


def _train(model, batches, ddp=False):
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-2)
    net = torch.nn.parallel.DistributedDataParallel(model) if ddp else model
    net.train()
    for ids, labels in batches:
        loss = net(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.prompt_encoder.state_dict().items()}


def _rank(rank, world, base_state, base_config, batches):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    base = LlamaForCausalLM(base_config)
    base.load_state_dict(base_state)
    torch.manual_seed(1)
    model = get_peft_model(base, CFG)
    half = [(ids[rank::world], labels[rank::world]) for ids, labels in batches]
    return _train(model, half, ddp=True)


def test_ddp_two_gloo_processes_equal_one_process(tiny_llama, make_batch):
    base = tiny_llama()
    # Every example has the same number of answer tokens, so the mean of the two ranks' mean
    # losses is the union batch's mean loss.
    batches = [make_batch(seed=s, batch=4) for s in range(3)]
    state = {k: v.clone() for k, v in base.state_dict().items()}
    results = run_distributed(_rank, world_size=2, args=(state, base.config, batches))
    torch.manual_seed(1)
    model = get_peft_model(base, CFG)
    start = {k: v.detach().clone() for k, v in model.prompt_encoder.state_dict().items()}
    single = _train(model, batches)
    assert all(not torch.equal(single[k], start[k]) for k in start), "training moved every tensor"
    for name, value in single.items():
        assert_close(results[0][name], value, rtol=1e-6, name=name)
        assert torch.equal(results[0][name], results[1][name])
