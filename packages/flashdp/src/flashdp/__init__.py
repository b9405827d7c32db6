"""FlashDP: Private Training Large Language Models with Efficient DP-SGD (NeurIPS 2025)."""

__all__: list[str] = []
