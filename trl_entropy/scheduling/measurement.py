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

__all__ = ["entropy_sums", "generation_batch_entropy", "global_mean_and_error", "global_token_mean",
           "measurement_standard_error", "pool_estimates", "sequence_spread_sums", "signal_token_count"]


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


def global_mean_and_error(entropies: torch.Tensor, mask: torch.Tensor, reduce
                          ) -> tuple[float | None, float | None, float]:
    """The token mean of ``entropies`` over ``mask``, its standard error (:func:`measurement_standard_error`) and the
    token count, summed over processes in one ``reduce(tensor, "sum")``; ``(None, None, 0)`` without a token."""
    m = mask.to(entropies.dtype)
    sums = torch.cat([torch.stack([(entropies * m).sum(), m.sum()]).float(), sequence_spread_sums(entropies, m)])
    totals = reduce(sums, "sum")
    count = float(totals[1])
    if count <= 0:
        return None, None, 0.0
    mean = float(totals[0]) / count
    return mean, measurement_standard_error(mean, count, totals[2:6]), count


def pool_estimates(estimates) -> tuple[float, float]:
    """Token-weighted pool of independent ``(mean, standard error, tokens)`` estimates of one token-mean entropy (the
    same policy measured on separate batches): ``(sum_r N_r m_r / N, sqrt(sum_r (N_r / N)^2 se_r^2))``."""
    estimates = [(float(m), float(s), float(n)) for m, s, n in estimates if n > 0]
    if not estimates:
        raise ValueError("pool_estimates needs at least one estimate with tokens.")
    total = sum(n for _, _, n in estimates)
    mean = sum(n * m for m, _, n in estimates) / total
    return mean, math.sqrt(sum((n / total) ** 2 * s * s for _, s, n in estimates))


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
