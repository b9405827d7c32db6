import math

import pytest
import torch
import transformers
from seal.train import dpo_loss, sequence_logprob


def _closed_form(pc, pr, rc, rr, beta):
    z = beta * ((pc - rc) - (pr - rr))
    return math.log1p(math.exp(-z)) if z > 0 else -z + math.log1p(math.exp(z))


def test_dpo_loss_equals_float64_closed_form():
    g = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (torch.randn(7, generator=g, dtype=torch.float64) * 5 for _ in range(4))
    for beta in (0.1, 0.5, 2.0):
        loss, cr, rj = dpo_loss(pc, pr, rc, rr, beta=beta)
        want = (
            sum(_closed_form(*map(float, row), beta) for row in zip(pc, pr, rc, rr, strict=True))
            / 7
        )
        assert math.isclose(loss.item(), want, rel_tol=1e-12)
        torch.testing.assert_close(cr, beta * (pc - rc), rtol=0, atol=0)
        torch.testing.assert_close(rj, beta * (pr - rr), rtol=0, atol=0)


def test_policy_equal_reference_gives_ln2_and_zero_rewards():
    x = torch.randn(5, dtype=torch.float64)
    y = torch.randn(5, dtype=torch.float64)
    loss, cr, rj = dpo_loss(x, y, x.clone(), y.clone(), beta=0.1)
    assert math.isclose(loss.item(), math.log(2), rel_tol=1e-12)
    assert torch.all(cr == 0) and torch.all(rj == 0)


def test_gradient_in_the_margin():
    beta = 0.3
    delta = torch.tensor([-4.0, -0.5, 0.0, 1.5, 6.0], dtype=torch.float64, requires_grad=True)
    zero = torch.zeros(5, dtype=torch.float64)
    loss, _, _ = dpo_loss(delta, zero, zero, zero, beta=beta)
    (loss * 5).backward()  # undo the mean
    torch.testing.assert_close(
        delta.grad, -beta * torch.sigmoid(-beta * delta.detach()), rtol=1e-12, atol=0
    )


def test_dpo_bad_input_names_the_argument():
    x = torch.zeros(3)
    for beta in (0.0, -1.0):
        with pytest.raises(ValueError, match="beta"):
            dpo_loss(x, x, x, x, beta=beta)
    with pytest.raises(ValueError, match="policy_rejected"):
        dpo_loss(x, torch.zeros(4), x, x)
    with pytest.raises(TypeError, match="reference_chosen"):
        dpo_loss(x, x, [0.0], x)


def _tiny_model():
    cfg = transformers.LlamaConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        attention_dropout=0.0,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).double().eval()


def _pad(seqs, width, left):
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):
        sl = slice(width - len(s), width) if left else slice(0, len(s))
        ids[i, sl] = torch.tensor(s)
        mask[i, sl] = 1
    return ids, mask


def test_sequence_logprob_padding_invariant_and_equals_unbatched_loop():
    model = _tiny_model()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 40, (n,), generator=g).tolist() for n in (3, 7, 1, 5)]
    comps = [torch.randint(1, 40, (n,), generator=g).tolist() for n in (4, 1, 6, 2)]
    with torch.no_grad():
        loop = torch.stack(
            [
                sequence_logprob(
                    model, torch.tensor([p]), torch.tensor([c]), torch.ones(1, len(p) + len(c))
                )[0]
                for p, c in zip(prompts, comps, strict=True)
            ]
        )
        c_ids, c_mask = _pad(comps, 6, left=False)
        out = {}
        for left in (True, False):
            p_ids, p_mask = _pad(prompts, 7, left=left)
            p_ids[p_mask == 0] = 39  # pad ids must not matter
            out[left] = sequence_logprob(model, p_ids, c_ids, torch.cat([p_mask, c_mask], 1))
        # an explicit reference: sum of log softmax of the completion tokens, unpadded
        p, c = prompts[0], comps[0]
        logits = model(torch.tensor([p + c])).logits[0].log_softmax(-1)
        ref = sum(logits[len(p) + k - 1, t] for k, t in enumerate(c))
    torch.testing.assert_close(out[True], out[False], rtol=0, atol=1e-6)
    torch.testing.assert_close(out[True], loop, rtol=0, atol=1e-6)
    assert math.isclose(loop[0].item(), float(ref), abs_tol=1e-9)


def test_sequence_logprob_bad_input():
    model = _tiny_model()
    with pytest.raises(ValueError, match="completion_ids"):
        sequence_logprob(
            model,
            torch.ones(2, 3, dtype=torch.long),
            torch.ones(3, 2, dtype=torch.long),
            torch.ones(2, 5),
        )
    with pytest.raises(ValueError, match="attention"):
        sequence_logprob(
            model,
            torch.ones(2, 3, dtype=torch.long),
            torch.ones(2, 2, dtype=torch.long),
            torch.ones(2, 4),
        )
    with pytest.raises(ValueError, match="prompt_ids"):
        sequence_logprob(
            model,
            torch.ones(2, 0, dtype=torch.long),
            torch.ones(2, 2, dtype=torch.long),
            torch.ones(2, 2),
        )
