"""Answer-level diversity in the trainer (issue 64): its settings, the answer extractor and the wiring.

Each training generation batch, every completion's answer is extracted on its own process, the answers are gathered
across processes (one `gather_object`, as TRL's own completion logs do) next to the rewards TRL already gathered, and
the group metrics of :mod:`trl_entropy.answer_diversity` are logged, identical on every rank. Each completion's row
also carries its group's outcome (``ec_group_solved``, carried to the optimizer steps by TRL's shuffle and split), so
the token entropy of the step's loss forward is split into solved and unsolved groups inside the trainer's one
all-reduce per step (no extra forward, no extra collective). Metrics: docs/metrics.md, "Answer diversity".
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch

from .._imports import import_callable
from .._trl_private import log_metric
from ..answer_diversity import answer_diversity, outcome_entropies, outcome_entropy_sums, solved_groups
from .faults import METRIC_PREFIX

__all__ = ["AnswerSettings", "AnswerDiversityMixin", "completion_answer", "default_full_reward", "outcome_entropy_sums"]


@dataclass
class AnswerSettings:
    """The answer-diversity metrics' fields of :class:`~trl_entropy.GRPOEntropyConfig` (and of `trl-entropy grpo`).

    Parameters:
        answer_extractor (`str` or `None`, *optional*, defaults to `None`):
            Import path (`"package.module.function"` or `"package.module:function"`) of a function that takes a
            completion as the reward functions get it (a string, or a list of messages for conversational prompts)
            and returns its answer, any hashable value: two completions with equal answers count as one answer in
            `entropy_control/distinct_answers` and the rest. Unset: the completion's text (a conversation's last
            message), stripped of surrounding whitespace and of the end-of-sequence token. The testbeds set theirs.
            In Python, `GRPOEntropyTrainer(answer_extractor=callable)` takes a function itself.
        answer_full_reward (`float` or `None`, *optional*, defaults to `None`):
            The reward (the weighted sum over the reward functions) at or above which a completion counts as fully
            rewarded; a group with one is *solved* in the answer-diversity metrics, a group without is *unsolved*.
            Unset: the sum of the positive `reward_weights`, i.e. every reward function at its full score of 1.0
            (TRL's reward functions score in [0, 1]). Set it for rewards on another scale.
    """

    answer_extractor: str | None = field(
        default=None,
        metadata={"help": "Import path ('package.module.function' or 'package.module:function') of a function "
                  "completion -> hashable answer, for the answer-diversity metrics (entropy_control/distinct_answers"
                  " and the rest). Default: the completion's text, stripped of whitespace and the end-of-sequence "
                  "token."},
    )
    answer_full_reward: float | None = field(
        default=None,
        metadata={"help": "Reward (weighted sum over the reward functions) at or above which a completion is fully "
                  "rewarded: a group with one is 'solved' in the answer-diversity metrics. Default: the sum of the "
                  "positive reward_weights (each reward function at 1.0)."},
    )

    def __post_init__(self):
        self._validate_answer_settings()
        parent = getattr(super(), "__post_init__", None)  # the config's next base (GRPOConfig's checks)
        if parent is not None:
            parent()

    def _validate_answer_settings(self) -> None:
        path = self.answer_extractor
        if path is not None:
            if callable(path) or not isinstance(path, str) or not path.strip():
                raise ValueError(
                    f"answer_extractor must be an import path such as 'package.module.function', got {path!r}. "
                    "To pass a function itself, give it to the trainer: GRPOEntropyTrainer(..., answer_extractor=fn)."
                )
            import_callable(path, "answer_extractor")  # a missing module or function is an error now, not in train()
        full = self.answer_full_reward
        if full is not None and (isinstance(full, bool) or not isinstance(full, (int, float))
                                 or not math.isfinite(full)):
            raise ValueError(f"answer_full_reward must be a finite number or None, got {full!r}.")


def completion_answer(completion, eos_token: str | None = None) -> str:
    """The default answer: the completion's text (a conversation's last message), stripped of surrounding whitespace
    and of ``eos_token`` at either end."""
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}, ...]
        completion = completion[-1].get("content", "") if completion and isinstance(completion[-1], dict) else ""
        if isinstance(completion, list):  # content parts: [{"type": "text", "text": ...}, ...]
            completion = "".join(p.get("text", "") for p in completion if isinstance(p, dict))
    text = str(completion).strip()
    while eos_token and text.endswith(eos_token):
        text = text[: -len(eos_token)].rstrip()
    while eos_token and text.startswith(eos_token):
        text = text[len(eos_token):].lstrip()
    return text


def default_full_reward(reward_weights) -> float:
    """The default ``answer_full_reward``: the sum of the positive reward weights (every function scoring 1.0)."""
    return float(sum(max(float(w), 0.0) for w in reward_weights))


def _eos_token(processing_class) -> str | None:
    eos = getattr(processing_class, "eos_token", None)
    if eos is None:  # a processor: its tokenizer has it
        eos = getattr(getattr(processing_class, "tokenizer", None), "eos_token", None)
    return eos if isinstance(eos, str) and eos else None


class AnswerDiversityMixin:
    """The answer-diversity metrics of `GRPOEntropyTrainer`, inherited before TRL's `GRPOTrainer` (its
    `_calculate_rewards` and `_generate_and_score_completions` call TRL's through ``super()``)."""

    def _init_answer_metrics(self, args, answer_extractor=None) -> None:
        path = getattr(args, "answer_extractor", None)
        if answer_extractor is not None and path:
            raise ValueError(f"answer_extractor is given twice: to the trainer and as args.answer_extractor={path!r}. "
                             "Give it once.")
        if answer_extractor is None and path:
            answer_extractor = import_callable(path, "answer_extractor")
        elif answer_extractor is None:
            answer_extractor = functools.partial(completion_answer, eos_token=_eos_token(self.processing_class))
        elif not callable(answer_extractor):
            raise TypeError(f"answer_extractor must be a function completion -> hashable answer, got "
                            f"{type(answer_extractor).__name__}.")
        self.answer_extractor = answer_extractor
        full = getattr(args, "answer_full_reward", None)
        self.answer_full_reward = float(full) if full is not None else default_full_reward(self.reward_weights)
        self._ec_row_solved: torch.Tensor | None = None  # this process's rows: 1.0 where the row's group is solved

    def _extract_answers(self, completions) -> list:
        answers = []
        for i, completion in enumerate(completions):
            answer = self.answer_extractor(completion)
            try:
                hash(answer)
            except TypeError:
                raise TypeError(f"answer_extractor returned an unhashable {type(answer).__name__} for completion {i} "
                                f"({answer!r}); return a str, a number or a tuple.") from None
            answers.append(answer)
        return answers

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._ec_row_solved = None
        if self.model.training:
            self._log_answer_diversity(completions, rewards_per_func, len(prompts))
        return rewards_per_func

    def _log_answer_diversity(self, completions, rewards_per_func: torch.Tensor, local: int) -> None:
        """Gather the answers, log the group metrics, keep this process's rows' solved flags."""
        from accelerate.utils import gather_object

        answers = gather_object(self._extract_answers(completions))  # every rank's, in rank order (as the rewards)
        n = self.num_generations
        if len(answers) != rewards_per_func.shape[0] or len(answers) % n:
            return  # not TRL's group layout: nothing to group
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        rewards = (rewards_per_func * weights).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = math.nan  # unscored: never fully rewarded
        solved = solved_groups(rewards.tolist(), n, self.answer_full_reward)
        for key, value in answer_diversity(answers, solved, n).items():
            log_metric(self, METRIC_PREFIX + key, value)
        start = self.accelerator.process_index * local  # TRL's process slice of the gathered batch
        rows = torch.tensor(solved, dtype=torch.float32).repeat_interleave(n)[start : start + local]
        self._ec_row_solved = rows.to(rewards_per_func.device)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        solved, self._ec_row_solved = self._ec_row_solved, None
        if solved is not None and solved.shape[0] == output["completion_mask"].shape[0]:
            output["ec_group_solved"] = solved  # split with its rows by TRL's shuffle, read by _compute_loss
        return output

    def _log_outcome_entropy(self, sums) -> None:
        """Log the step's token entropy over solved and unsolved groups from the all-reduced sums."""
        for key, value in outcome_entropies(sums).items():
            log_metric(self, METRIC_PREFIX + key, value)
