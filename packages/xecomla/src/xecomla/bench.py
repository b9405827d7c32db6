"""The xecomla benchmark suite (``neurips25 bench xecomla``).

Built so far: ``decode_step`` (speed) — one decode token of one layer against a T-token cache:
GQA (the teacher's ``LlamaAttention``, the baseline), MLA absorbed, MLA decompressed and the
Mamba2 ``step``, all through their real forward paths (the caches are cropped back after each
call). Not built yet: the quality case (the reduced reproduction of the issue's students), the
whole-model decode ratio and the peer arms (quanto / fp8 KV caches).
"""

from __future__ import annotations

from neurips25_core.bench import Context, Suite, compare, single_thread

SUITE = Suite(
    name="xecomla",
    paper="Zebra-Llama: Towards Extremely Efficient Hybrid Models",
    url="https://arxiv.org/abs/2505.17272",
)


def _teacher_config(hidden=64, heads=4, kv_heads=2, layers=8):
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        num_hidden_layers=layers,
        intermediate_size=3 * hidden,
        vocab_size=256,
        max_position_embeddings=8192,
    )
    cfg._attn_implementation = "sdpa"
    return cfg


@SUITE.case("decode_step", kind="speed")
def decode_step(ctx: Context) -> None:
    """Per-layer decode step at T cached tokens: GQA (baseline) vs MLA absorbed / decompressed vs Mamba2 step.

    Shapes of the issue's reduced run: d 64, 4 heads (2 KV), d_h 16; MLA r_q 48, r_kv 16, d_nope 8,
    d_rope 8, d_v 16 (24 cached numbers per token against GQA's 64). Absorbed and decompressed are
    checked equal (fp32, 1e-5) before timing; GQA and Mamba2 compute other functions.
    """
    import torch
    from transformers import DynamicCache
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

    from neurips25_core.testing import assert_close
    from xecomla import MLAConfig
    from xecomla.init import mamba_from_attention, mla_from_attention

    cfg = _teacher_config()
    mla_cfg = MLAConfig(r_q=48, r_kv=16, d_nope=8, d_rope=8, d_v=16)
    lengths = ctx.pick(smoke=[64], quick=[256, 1024], full=[256, 1024, 4096])
    torch.manual_seed(0)
    gqa = LlamaAttention(cfg, layer_idx=0).eval()
    mla = mla_from_attention(gqa, mla_cfg).eval()
    mla_dec = mla_from_attention(gqa, mla_cfg).eval()
    mla_dec.absorb = False
    mamba = mamba_from_attention(gqa).eval()
    rotary = LlamaRotaryEmbedding(cfg)

    def at_length(T):
        prefill = torch.randn(1, T, cfg.hidden_size)
        x = torch.randn(1, 1, cfg.hidden_size)
        pos = torch.full((1, 1), T)
        cos_sin = rotary(x, pos)
        caches = {}
        with torch.no_grad():
            for name, layer in (("gqa", gqa), ("mla", mla), ("mla_dec", mla_dec)):
                caches[name] = DynamicCache()
                pe = rotary(prefill, torch.arange(T)[None])
                layer(prefill, pe, None, cache=caches[name], position_ids=torch.arange(T)[None])
            _, _, conv_state, ssm_state = mamba.mix(prefill)

        def one(layer, name, pe):
            def run():
                with torch.no_grad():
                    out = layer(x, pe, None, cache=caches[name], position_ids=pos)[0]
                caches[name].crop(-1)  # back to T cached tokens
                return out

            return run

        fns = {
            "gqa": one(gqa, "gqa", cos_sin),
            "mla_absorbed": one(mla, "mla", None),
            "mla_decompressed": one(mla_dec, "mla_dec", None),
            "mamba2_step": lambda: mamba.step(x[:, 0], conv_state, ssm_state)[0],
        }
        with torch.no_grad():
            assert_close(fns["mla_absorbed"](), fns["mla_decompressed"](), rtol=1e-5)
        with single_thread(), torch.no_grad():
            result = compare(
                fns, baseline="gqa", min_time=ctx.pick(smoke=0.01, quick=0.2, full=1.0)
            )
        result.record(
            ctx,
            T=T,
            cached_per_token_gqa=2
            * cfg.num_key_value_heads
            * (cfg.hidden_size // cfg.num_attention_heads),
            cached_per_token_mla=mla_cfg.cache_width,
        )

    for T in lengths:
        at_length(T)
