"""Jet-Nemotron: Efficient Language Model with Post Neural Architecture Search (NeurIPS 2025)."""

__all__: list[str] = []
