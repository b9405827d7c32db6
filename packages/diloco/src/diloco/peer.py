"""The peer: ``torchft.local_sgd.DiLoCo`` (torchft 0.2.0, the ``peers`` extra) on the same ranks.

torchft runs one ``Manager`` per replica group (here: one process per replica), a localhost
lighthouse that forms the quorum, and its own gloo process group. Its DiLoCo steps an outer
optimizer over the model's parameters after restoring the backup, like ours, but has no final
sync: a run whose T is not a multiple of H ends with the replica's trailing inner steps, and we
evaluate the restored global model (what the paper evaluates). Without torchft, or when its
lighthouse cannot start, :func:`torchft_available` says why and the benchmark skips this arm.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch

__all__ = ["start_lighthouse", "torchft_available", "torchft_diloco"]


def torchft_available() -> tuple[bool, str]:
    """``(True, "")`` when torchft imports and a localhost lighthouse starts, else ``(False, why)``."""
    try:
        import torchft.local_sgd  # noqa: F401
        from torchft._torchft import LighthouseServer
    except Exception as exc:  # ImportError, or a wheel built against another torch
        return False, (
            f"torchft is not usable ({type(exc).__name__}: {exc}); install the peer with "
            "`uv sync --all-packages --extra peers` (torchft==0.2.0, Linux)"
        )
    try:
        server = LighthouseServer(bind="[::]:0", min_replicas=1)
        server.shutdown()
    except Exception as exc:
        return False, f"the torchft lighthouse cannot start here ({type(exc).__name__}: {exc})"
    return True, ""


def start_lighthouse(replicas: int):
    """A localhost torchft lighthouse that waits for ``replicas`` replica groups."""
    from torchft._torchft import LighthouseServer

    return LighthouseServer(bind="[::]:0", min_replicas=replicas, join_timeout_ms=60_000)


class _TorchftRun:
    def __init__(self, model, inner, spec, rank: int, world: int, extra: dict[str, Any]) -> None:
        import torch.distributed as dist
        from torchft import Manager, ProcessGroupGloo
        from torchft.local_sgd import DiLoCo as TorchftDiLoCo

        from diloco.engine import paper_outer_lr

        self.model = model
        self.store = dist.TCPStore(
            host_name="localhost", port=0, is_master=True, wait_for_workers=False
        )
        self.manager = Manager(
            pg=ProcessGroupGloo(timeout=timedelta(seconds=120)),
            load_state_dict=None,
            state_dict=None,
            min_replica_size=world,
            use_async_quorum=False,
            timeout=timedelta(seconds=120),
            quorum_timeout=timedelta(seconds=120),
            connect_timeout=timedelta(seconds=60),
            rank=0,
            world_size=1,
            store_addr="localhost",
            store_port=self.store.port,
            lighthouse_addr=extra["lighthouse"],
            replica_id=f"replica{rank}",
            init_sync=False,
        )
        outer_lr = spec.outer_lr if spec.outer_lr is not None else paper_outer_lr(world)
        self.outer = torch.optim.SGD(model.parameters(), lr=outer_lr, momentum=0.9, nesterov=True)
        self.diloco = TorchftDiLoCo(
            self.manager,
            [model],
            inner,
            self.outer,
            sync_every=spec.sync_every,
            backup_device=torch.device("cpu"),
            pin_memory=False,
        )
        self.diloco.__enter__()

    def finish(self) -> dict[str, Any]:
        # torchft has no final sync: evaluate the global model of the last completed outer step.
        self.diloco._restore_parameters()
        return {"outer_steps": self.manager.current_step(), "bytes_all_reduced": None}

    def close(self) -> None:
        self.diloco.__exit__(None, None, None)
        self.manager.shutdown(wait=False)


def torchft_diloco(model, inner, spec, rank: int, world: int, extra: dict[str, Any]) -> _TorchftRun:
    """Wrap ``model``/``inner`` in torchft's DiLoCo for replica ``rank`` (its hooks step it)."""
    return _TorchftRun(model, inner, spec, rank, world, extra)
