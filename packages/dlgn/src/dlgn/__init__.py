"""Mind the Gap: Removing the Discretization Gap in Differentiable Logic Gate Networks (NeurIPS 2025).

Logic gate networks trained as softmax mixtures (DLGN, ``mode="softmax"``) or with Gumbel
straight-through sampling of one circuit per step (GLGN, ``mode="gumbel"``), with bit-packed
inference of the discretized circuit.
"""

from . import data, metrics
from .functional import gate_table, gumbel_st, relaxed_gates
from .layers import Circuit, GroupSum, LogicLayer, LogicNet
from .ops import logic_layer
from .packed import PackedBits, pack_bits, packed_forward

__all__ = [
    "Circuit",
    "GroupSum",
    "LogicLayer",
    "LogicNet",
    "PackedBits",
    "data",
    "gate_table",
    "gumbel_st",
    "logic_layer",
    "metrics",
    "pack_bits",
    "packed_forward",
    "relaxed_gates",
]
