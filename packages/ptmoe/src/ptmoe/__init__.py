"""PT-MoE: An Efficient Finetuning Framework for Integrating Mixture-of-Experts into Prompt Tuning (NeurIPS 2025)."""

__all__: list[str] = []
