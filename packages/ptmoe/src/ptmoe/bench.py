"""The ptmoe benchmark suite (``neurips25 bench ptmoe``).

* ``step_time`` (speed, CPU, one thread): one AdamW training step (forward, backward, update of
  the prompt parameters only) of a frozen random-weight Llama for PT-MoE, and on the same prepend
  code PT, DPT and SMoP, plus peft's prompt tuning and LoRA (q_proj, v_proj) from the ``peers``
  extra (skipped with a message when absent). Our PT is checked equal to peft's PT with the same
  prompt before anything is timed. Also the time of composing the PT-MoE prompt against the
  forward it feeds. Records seconds per step (against PT), tokens/s and trainable parameters.

Not built yet: the quality cases (QA / math reduced reproduction), see the README.
"""

from __future__ import annotations

import torch

from neurips25_core.bench import Context, Suite, compare, single_thread

SUITE = Suite(
    name="ptmoe",
    paper="PT-MoE: An Efficient Finetuning Framework for Integrating Mixture-of-Experts into Prompt Tuning",
    url="https://arxiv.org/abs/2505.09519",
)


def _peft():
    try:
        import peft
    except ImportError:
        return None
    return peft


def _random_llama(hidden: int, layers: int, vocab: int = 260, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
    )
    return LlamaForCausalLM(config).eval()


def _arms(ctx: Context, hidden: int, layers: int, T: int):
    """name -> (model, parameter count). Every arm wraps its own copy of the same base."""
    from . import budget
    from .baselines import DecomposedPromptTuning, PromptTuning, SMoP, apply_prompt
    from .config import PTMoEConfig
    from .model import get_peft_model

    target = T * hidden
    tol = 0.15  # toy sizes cannot always land within 5 %; every arm's count is recorded
    r_moe = budget.solve("ptmoe", target, hidden, T, num_experts=2, tolerance=tol)["value"]
    r_dpt = budget.solve("dpt", target, hidden, T, tolerance=tol)["value"]
    g = torch.Generator().manual_seed(0)
    arms = {}
    base = _random_llama(hidden, layers)
    arms["pt"] = apply_prompt(base, PromptTuning(base.get_input_embeddings(), T, generator=g))
    base = _random_llama(hidden, layers)
    arms["ptmoe"] = get_peft_model(
        base, PTMoEConfig(prompt_length=T, num_experts=2, rank=r_moe), generator=g
    )
    base = _random_llama(hidden, layers)
    arms["dpt"] = apply_prompt(
        base, DecomposedPromptTuning(base.get_input_embeddings(), T, r_dpt, generator=g)
    )
    base = _random_llama(hidden, layers)
    arms["smop"] = apply_prompt(base, SMoP(base.get_input_embeddings(), 2, T // 2, generator=g))
    peft = _peft()
    if peft is None:
        ctx.log("step_time: peft not installed (install the 'peers' extra); skipping peft PT/LoRA")
    else:
        arms["peft_pt"] = peft.get_peft_model(
            _random_llama(hidden, layers),
            peft.PromptTuningConfig(
                task_type="CAUSAL_LM", num_virtual_tokens=T, prompt_tuning_init="SAMPLE_VOCAB"
            ),
        )
        arms["peft_lora"] = peft.get_peft_model(
            _random_llama(hidden, layers),
            peft.LoraConfig(
                task_type="CAUSAL_LM", r=ctx.pick(1, 3, 2), target_modules=["q_proj", "v_proj"]
            ),
        )
    return arms


def _check_pt_equals_peft(arms, ids, labels) -> None:
    from neurips25_core.testing import assert_close

    if "peft_pt" not in arms:
        return
    ours, theirs = arms["pt"], arms["peft_pt"]
    with torch.no_grad():
        theirs.prompt_encoder["default"].embedding.weight.copy_(ours.prompt_encoder.prompt)
        assert_close(
            ours(input_ids=ids, labels=labels).logits,
            theirs(input_ids=ids, labels=labels).logits,
            rtol=1e-5,
            name="our PT vs peft PT (same prompt)",
        )


@SUITE.case("step_time", kind="speed")
def step_time(ctx: Context) -> None:
    """Seconds per training step of every arm (ratio against PT), tokens/s, compose vs forward."""
    hidden = ctx.pick(smoke=32, quick=64, full=128)
    layers = ctx.pick(smoke=1, quick=2, full=4)
    T = ctx.pick(smoke=10, quick=40, full=40)
    batch, seq = ctx.pick(smoke=(4, 16), quick=(16, 64), full=(16, 128))
    with single_thread():
        arms = _arms(ctx, hidden, layers, T)
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(3, 260, (batch, seq), generator=g)
        labels = ids.clone()
        labels[:, : seq // 2] = -100
        _check_pt_equals_peft(arms, ids, labels)

        def stepper(model):
            params = [p for p in model.parameters() if p.requires_grad]
            opt = torch.optim.AdamW(params, lr=1e-3)
            model.train()

            def step():
                loss = model(input_ids=ids, labels=labels).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            return step

        counts = {
            name: sum(p.numel() for p in m.parameters() if p.requires_grad)
            for name, m in arms.items()
        }
        result = compare(
            {name: stepper(m) for name, m in arms.items()},
            baseline="pt",
            min_time=ctx.pick(smoke=0.01, quick=0.3, full=1.0),
        )
        result.record(ctx, hidden=hidden, layers=layers, T=T, batch=batch, seq=seq)
        for name in arms:
            ctx.record(
                "tokens_per_s",
                batch * seq / result[name].median,
                "tok/s",
                lower_is_better=False,
                impl=name,
                trainable=counts[name],
            )
        moe = arms["ptmoe"].eval()
        embeds = moe.base_model.get_input_embeddings()(ids)
        with torch.no_grad():
            parts = compare(
                {
                    "forward": lambda: moe(input_ids=ids),
                    "compose": lambda: moe.prompt_encoder(inputs_embeds=embeds),
                },
                baseline="forward",
                min_time=ctx.pick(smoke=0.01, quick=0.2, full=0.5),
            )
        parts.record(ctx, metric="compose_vs_forward", hidden=hidden, T=T, batch=batch, seq=seq)
