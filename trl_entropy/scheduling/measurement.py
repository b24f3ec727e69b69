"""What a control measures: the policy's token-mean entropy, from the tokens of one optimizer step.

With ``steps_per_generation`` k > 1 an optimizer step sees a 1/k share of its generation batch, so the plain reading
(``sum(H_now * mask) / sum(mask)``) varies with which completions the step drew: on SmolLM2, 12 completions of a
few tokens each, the readings of the k steps of one batch spread by 12-26% (relative sd) while the policy barely
moves between them. The *generation-batch* estimate pairs each token's entropy now with its entropy under the policy
that generated it (``H_gen``, from the old-log-prob forward that off-policy updates already run) and scales the
batch's mean ``H_gen`` by the ratio:

    H_batch_now ~= mean_batch(H_gen) * sum(H_now * mask) / sum(H_gen * mask)

A ratio estimator: the token-to-token spread cancels between numerator and denominator, the policy's change since
generation stays. On the first step after a generation (current policy = generating policy) it is exactly the
batch's mean ``H_gen``.
"""

from __future__ import annotations

import math

import torch

__all__ = ["entropy_pull_sums", "entropy_sums", "measurement_standard_error", "sequence_spread_sums", "generation_batch_entropy", "global_token_mean", "policy_token_weights",
           "pull_coefficient", "signal_token_count"]


def entropy_sums(entropies: torch.Tensor, mask: torch.Tensor, generation: torch.Tensor | None = None) -> torch.Tensor:
    """``[sum(H_now * m), sum(m), sum(H_gen * m), sum(m) where H_gen is known]`` over one micro-batch (float32).

    ``generation`` is the tokens' entropy at generation, the shape of ``entropies``, or ``None`` (then the last two
    entries are 0, and the step's pairing is incomplete). Summed over micro-batches and processes, the four give the
    step's plain reading (``[0] / [1]``) and, when ``[3] == [1]``, the ratio of :func:`generation_batch_entropy`."""
    m = mask.to(entropies.dtype)
    now = (entropies * m).sum()
    count = m.sum()
    if generation is None or generation.shape != entropies.shape:
        zero = torch.zeros((), dtype=now.dtype, device=now.device)
        return torch.stack([now, count, zero, zero]).float()
    gen = (generation.to(entropies.dtype) * m).sum()
    return torch.stack([now, count, gen, count]).float()


def sequence_spread_sums(entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[sum_i s_i^2, sum_i s_i * n_i, sum_i n_i^2, sequences]`` over one micro-batch (float32), with ``s_i`` sequence
    ``i``'s summed token entropy and ``n_i`` its token count (``sequences``: the rows with a token). Summed over
    micro-batches and processes, they give the step reading's standard error (:func:`measurement_standard_error`)."""
    m = mask.to(torch.float32)
    s = (entropies.detach().float() * m).sum(-1)
    n = m.sum(-1)
    return torch.stack([(s * s).sum(), (s * n).sum(), (n * n).sum(), (n > 0).float().sum()])


def measurement_standard_error(mean: float, count: float, spread) -> float | None:
    """The standard error of a step's token-mean entropy ``mean`` (``count`` tokens) from the summed
    :func:`sequence_spread_sums` ``spread``: the ratio estimator's, ``sqrt(B / (B - 1) * sum_i (s_i - mean * n_i)^2)
    / count`` over the ``B`` sequences (tokens of one completion are not independent draws; completions are
    treated as such). ``None`` with fewer than two sequences or a value that is not finite."""
    ss, sn, nn, rows = (float(x) for x in spread)
    if not (count > 0 and rows >= 2 and math.isfinite(mean)):
        return None
    squares = max(0.0, ss - 2.0 * mean * sn + mean * mean * nn)
    value = math.sqrt(rows / (rows - 1.0) * squares) / count
    return value if math.isfinite(value) else None


def global_token_mean(entropies: torch.Tensor | None, mask: torch.Tensor, reduce) -> float | None:
    """The token mean of ``entropies`` over ``mask``, summed over processes by ``reduce(tensor, "sum")`` (e.g.
    ``accelerator.reduce``): the batch's mean ``H_gen``. Every rank calls it, with ``entropies=None`` where it has
    nothing to add (its zeros keep the collective in step); ``None`` when no process has a token, or not finite."""
    sums = entropy_sums(entropies, mask)[:2] if entropies is not None else torch.zeros(2, device=mask.device)
    totals = reduce(sums, "sum")
    count = float(totals[1])
    value = float(totals[0]) / count if count > 0 else float("nan")
    return value if math.isfinite(value) else None


def generation_batch_entropy(batch_generation_entropy: float | None, sums) -> float | None:
    """The current policy's entropy on the whole generation batch, estimated from one step's summed
    :func:`entropy_sums` and the batch's mean entropy at generation; ``None`` when the step is not fully paired (a
    micro-batch without ``H_gen``), has no tokens, or a value is not finite."""
    now, count, gen, paired = (float(x) for x in sums)
    if batch_generation_entropy is None or count <= 0 or paired != count or not gen > 0:
        return None
    value = batch_generation_entropy * now / gen
    return value if math.isfinite(value) else None


# TRL's loss types whose policy term is a token mean over the micro-batch or the accumulation window, as the bonus is
TOKEN_MEAN_LOSS_TYPES = ("bnpo", "dapo", "cispo", "vespo")


def policy_token_weights(mask: torch.Tensor, loss_type: str, max_completion_length: int | None = None
                         ) -> torch.Tensor | None:
    """Each token's weight in the policy term of TRL's loss, relative to its weight in the entropy bonus (a token
    mean over the micro-batch, whatever the loss type), for :func:`entropy_pull_sums`; ``None`` where the two are
    the same (the token-mean loss types, ``TOKEN_MEAN_LOSS_TYPES``, and any type this function does not know).

    With ``N`` the micro-batch's tokens, ``B`` its sequences and ``len_i`` sequence ``i``'s: ``"grpo"`` and
    ``"sapo"`` average each sequence's tokens, then the sequences (``N / (B * len_i)``); ``"dr_grpo"`` divides by
    ``B * max_completion_length`` (``N / (B * L)``); ``"luspo"`` sums each sequence's tokens and averages the
    sequences (``N / B``). ``mask`` (B, T) is the policy term's token mask."""
    if loss_type in TOKEN_MEAN_LOSS_TYPES:
        return None
    m = mask.to(torch.float32)
    n, rows = m.sum(), m.shape[0]
    if loss_type in ("grpo", "sapo"):
        per_row = n / (rows * m.sum(-1).clamp(min=1.0))
    elif loss_type == "dr_grpo" and max_completion_length:
        per_row = (n / (rows * float(max_completion_length))).expand(rows)
    elif loss_type == "luspo":
        per_row = (n / rows).expand(rows)
    else:
        return None
    return per_row[:, None].expand_as(m)


def entropy_pull_sums(logps: torch.Tensor, entropies: torch.Tensor, advantages: torch.Tensor,
                      mask: torch.Tensor, policy_weights: torch.Tensor | None = None) -> torch.Tensor:
    """``[sum(m * w * (log p + H) * A), sum(m * (log p + H)^2)]`` over one micro-batch (float32): the two sums whose
    ratio (:func:`pull_coefficient`) is the entropy coefficient that balances this batch's policy-gradient pull on
    entropy.

    Why these two (Cui et al. 2025, the entropy dynamics of softmax policies under natural policy gradient): one
    step changes a state's entropy by ``dH ~= -eta * Cov_{a~pi}(log pi(a), A(a))``. ``E_{a~pi}[log pi(a)] = -H``,
    so ``log p + H`` is the sampled token's log-prob centred on its own state, and ``(log p + H) * A`` estimates
    that covariance from the token the policy sampled. An entropy bonus ``c * H`` acts as the advantage
    ``-c * (log pi(a) + H)`` (its gradient at a state is ``E_a[grad log pi(a) * (-log pi(a) - H)]``), so it changes
    entropy by ``eta * c * Var_{a~pi}(log pi(a))``, estimated by ``(log p + H)^2``. The coefficient with no net
    first-order change is the ratio ``Cov / Var``; the step size ``eta`` cancels. TRL's bonus is a token mean;
    where the loss type weighs the policy term's tokens otherwise (``"grpo"``: each sequence's tokens by ``1 /
    length``), ``policy_weights`` (:func:`policy_token_weights`, relative to the bonus's token weight) weigh the
    covariance's tokens as the loss does; ``None`` for the token-mean types (``"dapo"``, the default, ``"bnpo"``).
    Importance ratios, clipping and a loss type's other terms are not modelled (the estimate is first order, at
    ratio 1).

    ``logps`` and ``entropies`` are the current policy's per-token log-prob of the sampled token and entropy
    (B, T); ``advantages`` (B,), (B, 1) or (B, T); ``mask`` (B, T), 0/1 or token weights. Summed over micro-batches and
    processes."""
    m = mask.to(torch.float32)
    centred = logps.detach().float() + entropies.detach().float()
    adv = advantages.detach().float()
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    weighted = m if policy_weights is None else m * policy_weights.to(m)
    return torch.stack([(centred * adv * weighted).sum(), (centred * centred * m).sum()])


def signal_token_count(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``sum(m * [A != 0])`` over one micro-batch (float32, a 0-d tensor): the tokens the policy gradient acts on.

    A group whose rewards are all equal has advantage 0 on every token, so it pulls on entropy neither way, while an
    entropy bonus acts on every token alike. Divided by ``sum(m)`` (summed over micro-batches and processes), it is
    the step's *signal fraction* (logged as ``entropy_control/bonus_signal_fraction``). ``advantages`` (B,), (B, 1)
    or (B, T); ``mask`` (B, T)."""
    m = mask.to(torch.float32)
    adv = advantages.detach()
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    return (m * (adv != 0).to(torch.float32)).sum()


def pull_coefficient(cov: float, var: float) -> float | None:
    """The balancing coefficient ``cov / var`` of :func:`entropy_pull_sums`' two sums; ``None`` when ``var`` is not
    positive or a value is not finite."""
    if not (math.isfinite(cov) and math.isfinite(var) and var > 0):
        return None
    return cov / var
