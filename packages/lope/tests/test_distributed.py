"""train_lope under DDP (two gloo processes, half a batch each) equals one process on the union batch."""

import lope
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from neurips25_core.distributed import run_distributed
from neurips25_core.testing import assert_close


def _train(rank, world_size):
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=24,
    )
    model = lope.get_peft_model(LlamaForCausalLM(config), lope.LoPEConfig(r=2, lora_dropout=0.0))
    rows = slice(rank * 4 // world_size, (rank + 1) * 4 // world_size)

    def stream(seed):
        def batch(step):
            g = torch.Generator().manual_seed(seed * 1000 + step)
            x = torch.randint(0, 32, (4, 13), generator=g)[rows]
            return x[:, :-1], x[:, 1:]

        return batch

    lope.train_lope(model, stream(1), stream(2), steps=4, lr=1e-2)
    return {k: v.detach().clone() for k, v in model.adapter_state_dict().items()}


def test_ddp_equals_one_process_in_both_stages():
    single = _train(0, 1)
    ranks = run_distributed(_train, world_size=2)
    for state in ranks:
        for k, v in single.items():
            assert_close(state[k], v, rtol=1e-6, name=k)
    alone = _train(0, 2)  # half the batch without a process group: no gradient averaging
    assert any((alone[k] - v).abs().max() > 1e-4 for k, v in single.items()), "shards must matter"
    moved = [k for k, v in single.items() if k.endswith("lora_B") and v.abs().sum() > 0]
    assert moved, "the adapters trained"
