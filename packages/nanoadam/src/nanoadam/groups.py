"""``param_groups``: the sparse group (NanoAdam on small weights) and the dense AdamW group."""

from __future__ import annotations

import torch.nn as nn

DEFAULT_EXCLUDE = ("norm", "classifier", "lm_head", "head")


def param_groups(model: nn.Module, exclude=DEFAULT_EXCLUDE, **dense_overrides) -> list[dict]:
    """``[sparse_group, dense_group]`` for :class:`nanoadam.NanoAdam`, keeping parameter names.

    A parameter whose name contains any ``exclude`` pattern, or which is 1-D (biases, norms), goes
    to the dense AdamW group; ``dense_overrides`` (e.g. ``lr=``) apply to that group.

    >>> import torch
    >>> m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    >>> [len(g["params"]) for g in param_groups(m)]
    [1, 3]
    """
    if isinstance(exclude, str):
        exclude = (exclude,)
    sparse, dense, sparse_names, dense_names = [], [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim < 2 or any(pat in name for pat in exclude):
            dense.append(p), dense_names.append(name)
        else:
            sparse.append(p), sparse_names.append(name)
    if not sparse:
        raise ValueError(
            f"exclude: {tuple(exclude)!r} leaves no sparse (>= 2-D) parameter to select from"
        )
    groups = [{"params": sparse, "names": sparse_names, "sparse": True}]
    if dense:
        groups.append({"params": dense, "names": dense_names, "sparse": False, **dense_overrides})
    return groups
