"""Breaking the Compression Ceiling: Data-Free Pipeline for Ultra-Efficient Delta Compression (UltraDelta) (NeurIPS 2025)."""

__all__: list[str] = []
