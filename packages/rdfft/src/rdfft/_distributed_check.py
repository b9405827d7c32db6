"""BCA fine-tuning under DistributedDataParallel (gloo, CPU processes) versus one process.

Used by ``tests/test_distributed.py``.
Each rank trains the same BCA-adapted tiny Llama on its shard of every global batch; DDP averages
the adapter gradients, so after each step the adapters must equal one process training on the
whole batch.
"""

from __future__ import annotations

import torch

from rdfft.layers import BCAdapter, apply_bca, bca_parameter_groups

STEPS = 3
GLOBAL_BATCH = 4
SEQ = 16


class _TinyLM(torch.nn.Module):
    """Embedding -> two adapted projections -> logits: a transformers-free stand-in (fast spawn)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(256, 64)
        self.q_proj = torch.nn.Linear(64, 64)
        self.v_proj = torch.nn.Linear(64, 64)
        self.head = torch.nn.Linear(64, 256)

    def forward(self, tokens):
        h = self.embed(tokens)
        return self.head(torch.tanh(self.q_proj(h)) * self.v_proj(h))


def _model(kind: str = "mlp"):
    torch.manual_seed(0)
    if kind == "llama":
        from neurips25_core.models import tiny_llama, tiny_llama_config

        model = tiny_llama(tiny_llama_config(hidden_size=64, num_layers=1, num_heads=2), seed=0)
    else:
        model = _TinyLM()
    apply_bca(model, ("q_proj", "v_proj"), block_size=16, backend="rdfft")
    return model.double()


def _batches():
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 256, (GLOBAL_BATCH, SEQ + 1), generator=g) for _ in range(STEPS)]


def _loss(model, tokens):
    out = model(tokens[:, :-1])
    logits = out.logits if hasattr(out, "logits") else out
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)
    )


def _adapters(model) -> list[torch.Tensor]:
    return [m.c.detach().clone() for m in model.modules() if isinstance(m, BCAdapter)]


def _train(model, shard: slice, wrapped=None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    net = wrapped if wrapped is not None else model
    opt = torch.optim.SGD(bca_parameter_groups(model, lr=5.0), lr=5.0)
    first_grads: list[torch.Tensor] = []
    for step, tokens in enumerate(_batches()):
        opt.zero_grad()
        _loss(net, tokens[shard]).backward()
        if step == 0:
            first_grads = [m.c.grad.clone() for m in model.modules() if isinstance(m, BCAdapter)]
        opt.step()
    return first_grads, _adapters(model)


def single_process_reference(kind: str = "mlp") -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(first-step adapter gradients, adapters after STEPS steps) of one process, whole batches."""
    return _train(_model(kind), slice(None))


def _rank(rank: int, world: int, kind: str) -> dict[str, list[torch.Tensor]]:
    """One DDP rank (called by ``neurips25_core.distributed.run_distributed``)."""
    model = _model(kind)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    per = GLOBAL_BATCH // world
    grads, adapters = _train(model, slice(rank * per, (rank + 1) * per), wrapped=ddp)
    return {"grads": grads, "adapters": adapters}


def run_ddp(world: int, kind: str = "mlp") -> dict[str, list[torch.Tensor]]:
    """Train under DDP in ``world`` CPU processes (gloo, forked by the core's
    ``run_distributed``); rank 0's first-step gradients and final adapters.

    ``kind``: "mlp" (a transformers-free tiny LM, seconds) or "llama" (a 1-layer tiny Llama).
    """
    from neurips25_core.distributed import run_distributed

    return run_distributed(_rank, world_size=world, args=(kind,))[0]
