"""All You Need is One: Capsule Prompt Tuning with a Single Vector (NeurIPS 2025)."""

__all__: list[str] = []
