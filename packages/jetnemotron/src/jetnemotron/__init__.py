"""Jet-Nemotron: Efficient Language Model with Post Neural Architecture Search (NeurIPS 2025).

JetBlock (the gated delta rule with an input-generated causal convolution on the values), its
baselines, and PostNAS (a frozen-MLP once-for-all supernet plus beam search for where to keep full
attention). Importing this package never imports triton or transformers.
"""

from jetnemotron.ops import dynamic_conv, dynamic_conv_step, gated_delta_rule

__all__ = ["dynamic_conv", "dynamic_conv_step", "gated_delta_rule"]
