"""How large the entropy term's gradient is next to the policy gradient's, on the SmolLM2 testbed's starting model.

    python -m benchmarks.gradient_scale [--batches 6] [--seed 0]

For a few generation batches of the tracking benchmark's shape (3 prompts x 4 completions of at most 4 tokens,
temperature 1) it prints the norm of the gradient of the on-policy GRPO loss ``-mean(A * log p)`` (token mean,
group-normalised advantages), the norm of the gradient of the token-mean entropy ``H``, and their cosine. A loss
``L_pg - c * H`` moves the weights along ``g_pg - c * g_H``; where ``|c| * |g_H|`` is comparable to ``|g_pg|``, the
entropy term, not the reward, sets the update's direction (and Adam's normalisation, which divides by the running
size of the whole gradient, shrinks the reward's share of each step). A batch whose groups all got the same reward
has no policy gradient (``|g_pg| = 0``).
"""

from __future__ import annotations

import argparse
import statistics

import torch

from trl_entropy.testbeds import get_testbed

PROMPTS, GROUP, TOKENS = 3, 4, 4


def completion_mask(completions: torch.Tensor, eos_ids) -> torch.Tensor:
    """1 up to and including each row's first end-of-sequence token, 0 after it."""
    is_eos = torch.isin(completions, torch.tensor(list(eos_ids)))
    after = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
    return (~after).float()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    torch.manual_seed(a.seed)
    testbed = get_testbed("smollm2")
    model, tokenizer = testbed.load(False)
    train, _ = testbed.datasets(a.seed)
    params = [q for q in model.parameters() if q.requires_grad]
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    print("| batch | reward | H | \\|g_pg\\| | \\|g_H\\| | cos(g_pg, g_H) |\n|---|---|---|---|---|---|")
    rows = []
    for b in range(a.batches):
        problems = [train[i] for i in range(b * PROMPTS, (b + 1) * PROMPTS)]
        enc = tokenizer([x["prompt"] for x in problems], return_tensors="pt", padding=True)
        enc = {k: v.repeat_interleave(GROUP, 0) for k, v in enc.items()}
        start = enc["input_ids"].shape[1]
        with torch.no_grad():
            ids = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=TOKENS,
                                 pad_token_id=tokenizer.pad_token_id)
        completions = ids[:, start:]
        texts = tokenizer.batch_decode(completions, skip_special_tokens=True)
        rewards = torch.tensor(testbed.reward(texts, [x["answer"] for x in problems for _ in range(GROUP)]))
        grouped = rewards.view(PROMPTS, GROUP)
        adv = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1, 1)
        mask = completion_mask(completions, eos)
        attention = torch.cat([enc["attention_mask"], torch.ones_like(completions)], dim=1)
        logits = model(input_ids=ids, attention_mask=attention).logits[:, start - 1:-1].float()
        logp = torch.log_softmax(logits, dim=-1)
        token_logp = logp.gather(-1, completions.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp.exp() * logp).sum(-1)
        n = mask.sum()
        pg_loss = -(adv * token_logp * mask).sum() / n
        h = (entropy * mask).sum() / n
        g_pg = torch.cat([g.reshape(-1) for g in torch.autograd.grad(pg_loss, params, retain_graph=True)])
        g_h = torch.cat([g.reshape(-1) for g in torch.autograd.grad(h, params)])
        cos = torch.nn.functional.cosine_similarity(g_pg, g_h, dim=0).item() if g_pg.norm() > 0 else float("nan")
        rows.append((g_pg.norm().item(), g_h.norm().item(), cos))
        print(f"| {b} | {rewards.mean():.2f} | {h:.3f} | {g_pg.norm():.2f} | {g_h.norm():.2f} | {cos:+.2f} |", flush=True)
    live = [r for r in rows if r[0] > 0]
    if live:
        ratio = statistics.mean(r[1] for r in live) / statistics.mean(r[0] for r in live)
        print(f"\nbatches with a policy gradient: {len(live)} of {len(rows)}; mean |g_H| / mean |g_pg| = {ratio:.2f}: "
              f"an entropy coefficient of {1 / ratio:.2f} gives the entropy term the policy gradient's size")


if __name__ == "__main__":
    main()
