"""Token trees with greedy verification (temperature 0 only).

A static tree is given by its branching factors ``(b_1, ..., b_D)``: the draft proposes its top
``b_1`` tokens for the next position, then its top ``b_2`` continuations of each of them, and so
on to depth ``D`` (``(1,) * D`` is the chain of ``D`` tokens). The draft expands the tree one depth
per forward, every node attending to the committed prefix, its ancestors and itself (fuzzy
forwards work unchanged: each node's computation only sees its own path). The base model scores
every node in one forward with the same tree mask, and greedy verification keeps the longest path
whose every token is the base model's argmax after its parent; the base's argmax after the last
kept node is the new token. The result equals the base model's greedy decoding token for token,
as for chains. Tree sampling at temperature > 0 (recursive rejection, SpecInfer) is not built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

__all__ = [
    "TokenTree",
    "check_branching",
    "draft_tree",
    "top_tokens",
    "verify_tree_greedy",
    "verify_tree_greedy_reference",
]


@dataclasses.dataclass
class TokenTree:
    """Nodes in depth-major order. ``parents[i]`` is the index of node i's parent, -1 for the
    children of the last committed token; ``depths`` start at 1; ``slots[i]`` is the draft cache
    slot holding node i's (fuzzy) K/V, -1 for nodes never fed to the draft (the last depth)."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]
    slots: list[int]

    def __len__(self) -> int:
        return len(self.tokens)

    def children(self, node: int) -> list[int]:
        """Children of ``node`` (-1: the roots), in drafting order."""
        return [i for i, p in enumerate(self.parents) if p == node]

    def ancestors(self) -> torch.Tensor:
        """(n, n) bool: ``[i, j]`` iff node j is node i or one of its ancestors."""
        n = len(self)
        out = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            j = i
            while j >= 0:
                out[i, j] = True
                j = self.parents[j]
        return out

    def path(self, node: int) -> list[int]:
        """Node indices from a root down to ``node``."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]


def check_branching(tree: Sequence[int], gamma: int) -> tuple[int, ...]:
    """Validate a branching tuple of length ``gamma``: ints >= 1."""
    if isinstance(tree, (str, bytes)) or not isinstance(tree, Sequence):
        raise TypeError(
            f"tree: expected a sequence of branching factors, got {type(tree).__name__}"
        )
    tree = tuple(tree)
    if not tree or any(not isinstance(b, int) or isinstance(b, bool) or b < 1 for b in tree):
        raise ValueError(f"tree: expected branching factors that are ints >= 1, got {tree!r}")
    if len(tree) != gamma:
        raise ValueError(
            f"tree: expected gamma={gamma} branching factors (one per depth), got {tree!r}"
        )
    return tree


def top_tokens(logits: torch.Tensor, k: int) -> list[int]:
    """The ``k`` highest-scoring tokens, best first; ties go to the lower id, so ``k = 1`` is
    ``argmax`` (the chain's greedy draft token)."""
    return torch.sort(logits, descending=True, stable=True).indices[:k].tolist()


def draft_tree(draft, first_logits: torch.Tensor, branching: Sequence[int]) -> TokenTree:
    """Expand a static tree with a :class:`~easyspec.draft.FuzzyDraft` whose cache holds the
    committed sequence (length t) and whose next-token logits are ``first_logits``.

    Depth d's nodes sit at true position ``t + d - 1``; the nodes of depths ``1 .. D - 1`` are fed
    (fuzzy, one forward per depth) and occupy draft cache slots from ``t`` on, so after
    verification :meth:`~easyspec.draft.FuzzyDraft.truncate` back to ``t`` drops them all.
    """
    t = draft.length
    tokens = top_tokens(first_logits, branching[0])
    tree = TokenTree(tokens, [-1] * len(tokens), [1] * len(tokens), [-1] * len(tokens))
    frontier = list(range(len(tokens)))
    for depth in range(1, len(branching)):
        start = draft.length
        for j, node in enumerate(frontier):
            tree.slots[node] = start + j
        mask = torch.zeros(len(frontier), start + len(frontier), dtype=torch.bool)
        mask[:, :t] = True
        for j, node in enumerate(frontier):
            for a in tree.path(node):
                mask[j, tree.slots[a]] = True
        logits = draft.extend(
            torch.tensor([tree.tokens[i] for i in frontier]),
            positions=torch.full((len(frontier),), t + depth - 1),
            mask=mask,
        )
        new = []
        for j, node in enumerate(frontier):
            for x in top_tokens(logits[j], branching[depth]):
                tree.tokens.append(x)
                tree.parents.append(node)
                tree.depths.append(depth + 1)
                tree.slots.append(-1)
                new.append(len(tree.tokens) - 1)
        frontier = new
    return tree


def verify_tree_greedy(tree: TokenTree, logits: torch.Tensor) -> tuple[list[int], int]:
    """Greedy verification: ``(accepted node path, next token)``.

    ``logits`` (1 + n, V): the base model's logits after the last committed token (row 0) and
    after each node (row 1 + i). From the root, keep the child whose token is the base argmax,
    while one exists; the next token is the argmax after the last kept node (the bonus when that
    node is a leaf). Siblings carry distinct tokens, so the path is unique.
    """
    path, row = [], 0
    node = -1
    while True:
        target = int(logits[row].argmax())
        match = [c for c in tree.children(node) if tree.tokens[c] == target]
        if not match:
            return path, target
        node = match[0]
        path.append(node)
        row = 1 + node


@torch.no_grad()
def verify_tree_greedy_reference(
    base, seq: Sequence[int], tree: TokenTree
) -> tuple[list[int], int]:
    """The reference: the base model's argmax after the committed ``seq`` + each candidate path,
    each from a fresh full forward (no cache, no tree mask), walked as in
    :func:`verify_tree_greedy`."""
    device = next(base.parameters()).device
    path, prefix, node = [], list(seq), -1
    while True:
        ids = torch.tensor([prefix], device=device)
        target = int(base(input_ids=ids).logits[0, -1].argmax())
        match = [c for c in tree.children(node) if tree.tokens[c] == target]
        if not match:
            return path, target
        node = match[0]
        path.append(node)
        prefix.append(target)
