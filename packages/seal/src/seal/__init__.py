"""Self-Refining Language Model Anonymizers via Adversarial Distillation (NeurIPS 2025)."""

__all__: list[str] = []
