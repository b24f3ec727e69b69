"""Answer-level diversity of GRPO's groups: pure functions on lists and tensors (issue 64).

A *group* is the ``num_generations`` completions of one prompt, consecutive in TRL's generation batch. Each
completion has an *answer* (what the user's answer extractor returns: any hashable value) and a reward (the weighted
sum over the reward functions, NaN where none scored it). A group is *solved* when at least one of its completions
reached the full reward, *unsolved* otherwise. Per group:

* distinct answers: the number of different answers among its completions (1 to ``group_size``);
* answer entropy: the entropy (nats) of the answers' empirical distribution in the group, ``-sum p log p`` over the
  distinct answers with ``p`` their share (0 when every completion gave the same answer, ``log(group_size)`` when all
  differ).

:func:`answer_diversity` averages both over all groups, over the solved ones and over the unsolved ones;
:func:`outcome_entropy_sums` splits the token entropy of a micro-batch the same way. The trainer logs them as
``entropy_control/distinct_answers`` and the rest (docs/metrics.md); ``benchmarks/payoff.py`` counts its distinct
answers with :func:`distinct_answers` too, so one definition serves both.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Hashable, Sequence

import torch

__all__ = ["FULL_REWARD_TOLERANCE", "answer_diversity", "answer_entropy", "distinct_answers", "group_values",
           "mean_distinct_answers", "outcome_entropies", "outcome_entropy_sums", "solved_groups"]

# A reward counts as full when it is at least the full reward minus this much (relative, at least 1e-6 absolute):
# weighted sums such as 0.1 + 0.2 land a rounding error below their nominal value.
FULL_REWARD_TOLERANCE = 1e-6


def group_values(values: Sequence, group_size: int) -> list[list]:
    """``values`` cut into consecutive groups of ``group_size`` (the layout of TRL's generation batch)."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an integer >= 1, got {group_size!r}.")
    values = list(values)
    if len(values) % group_size:
        raise ValueError(f"{len(values)} values do not split into groups of {group_size}.")
    return [values[i : i + group_size] for i in range(0, len(values), group_size)]


def distinct_answers(group: Sequence[Hashable]) -> int:
    """The number of different answers in one group."""
    return len(set(group))


def answer_entropy(group: Sequence[Hashable]) -> float:
    """The entropy (nats) of the answers' empirical distribution in one group: ``-sum p log p``."""
    n = len(group)
    if n == 0:
        raise ValueError("an empty group has no answer distribution.")
    return -sum(c / n * math.log(c / n) for c in Counter(group).values()) + 0.0  # + 0.0: never -0.0


def mean_distinct_answers(answers: Sequence[Hashable], group_size: int) -> float:
    """The mean of :func:`distinct_answers` over the groups of ``answers`` (consecutive groups of ``group_size``)."""
    return statistics.fmean(distinct_answers(g) for g in group_values(answers, group_size))


def solved_groups(rewards: Sequence[float], group_size: int, full_reward: float) -> list[bool]:
    """Per group of ``group_size`` consecutive rewards: whether one of them reached ``full_reward`` (within
    :data:`FULL_REWARD_TOLERANCE`). A NaN reward (no reward function scored the completion) never counts."""
    floor = full_reward - FULL_REWARD_TOLERANCE * max(1.0, abs(full_reward))
    return [any(r >= floor for r in g if not math.isnan(r)) for g in group_values([float(r) for r in rewards],
                                                                                 group_size)]


def answer_diversity(answers: Sequence[Hashable], solved: Sequence[bool], group_size: int) -> dict[str, float]:
    """The answer-level metrics of one generation batch (names without the ``entropy_control/`` prefix).

    ``answers``: one per completion, groups of ``group_size`` consecutive; ``solved``: one flag per group
    (:func:`solved_groups`). Returns ``solved_groups`` (the share of solved groups), ``distinct_answers`` and
    ``answer_entropy`` (means over every group), and the same two over the solved groups (``..._solved``) and the
    unsolved ones (``..._unsolved``); a split with no group is left out (never NaN)."""
    groups = group_values(answers, group_size)
    if len(solved) != len(groups):
        raise ValueError(f"{len(solved)} solved flags for {len(groups)} groups.")
    if not groups:
        return {}
    distinct = [distinct_answers(g) for g in groups]
    entropy = [answer_entropy(g) for g in groups]
    out = {"solved_groups": sum(map(bool, solved)) / len(groups),
           "distinct_answers": statistics.fmean(distinct), "answer_entropy": statistics.fmean(entropy)}
    for part, want in (("solved", True), ("unsolved", False)):
        idx = [i for i, s in enumerate(solved) if bool(s) is want]
        if idx:
            out[f"distinct_answers_{part}"] = statistics.fmean(distinct[i] for i in idx)
            out[f"answer_entropy_{part}"] = statistics.fmean(entropy[i] for i in idx)
    return out


def outcome_entropy_sums(entropies: torch.Tensor, mask: torch.Tensor, solved: torch.Tensor | None) -> torch.Tensor:
    """``[sum(H * m) over solved rows, sum(m) over solved rows, the same two over unsolved rows]`` of one micro-batch
    (float32); ``solved`` is one flag per row (its group's, :func:`solved_groups`), ``None`` gives zeros. Summed over
    micro-batches and processes, :func:`outcome_entropies` divides them."""
    if solved is None or solved.shape[0] != entropies.shape[0]:
        return torch.zeros(4, dtype=torch.float32, device=entropies.device)
    m = mask.to(entropies.dtype)
    s = solved.to(device=m.device, dtype=m.dtype).reshape(-1, *([1] * (m.dim() - 1)))
    h = entropies.detach() * m
    return torch.stack([(h * s).sum(), (m * s).sum(), (h * (1 - s)).sum(), (m * (1 - s)).sum()]).float()


def outcome_entropies(sums: Sequence[float]) -> dict[str, float]:
    """``{"measured_solved": ..., "measured_unsolved": ...}``: the token-mean entropy over the tokens of solved and of
    unsolved groups, from summed :func:`outcome_entropy_sums`; a split without tokens is left out."""
    solved_h, solved_n, unsolved_h, unsolved_n = (float(x) for x in sums)
    out = {}
    if solved_n > 0 and math.isfinite(solved_h):
        out["measured_solved"] = solved_h / solved_n
    if unsolved_n > 0 and math.isfinite(unsolved_h):
        out["measured_unsolved"] = unsolved_h / unsolved_n
    return out
