"""Entropy staged learning (Wang et al., "Entropy Scheduling", section 5): an annealing-phase curriculum.

When the entropy schedule enters its annealing phase (or at a given optimizer step), training switches to a
second dataset (e.g. higher-quality problems), more rollouts per prompt and a longer completion budget (the paper:
8 -> 32 rollouts, 4k -> 16k tokens).

Mechanism (trl 1.16 / transformers 5): the whole run is one data stream decided up front.

* TRL's training data comes from a ``RepeatSampler`` built once per ``train()`` call; the HF Trainer then walks the
  dataloader in epochs and, on resume, skips ``global_step * gradient_accumulation_steps`` batches. Swapping the
  dataloader mid-epoch would break that bookkeeping. Instead, :meth:`AnnealingCurriculumCallback.attach` gives the
  trainer a dataset that holds both datasets (:class:`CurriculumDataset`) and a sampler
  (:class:`CurriculumSampler`) whose index stream covers exactly ``max_steps`` optimizer steps: phase-1 generation
  rounds draw groups of ``num_generations`` (phase 1) from the first dataset, then phase-2 rounds draw groups of the
  new ``num_generations`` from the second. To the Trainer this is one epoch of ``max_steps`` steps.
* The stream is a pure function of (sizes, seed, switch step): it is rebuilt identically by a resumed run, whose
  Trainer skips the consumed batches of the one epoch, so resume lands in the right phase at the right prompt.
* The switch happens only at a step that starts a generation round *and* an optimizer step (a multiple of
  ``lcm(steps_per_generation * num_iterations, gradient_accumulation_steps)`` micro-batches): never inside TRL's
  buffered ``steps_per_generation`` window. A requested step that is not such a boundary is rounded up (warning).
* At ``on_step_begin`` of the switch step (which runs before TRL generates for that step) the callback sets the
  trainer's ``num_generations``, ``max_completion_length`` and generation budget (``generation_config.max_new_tokens``,
  ``generation_kwargs["max_new_tokens"]``, vLLM's ``max_completion_length``), so TRL groups rewards and normalizes
  advantages over the new group size. The phase is a function of ``global_step`` only.

Within a phase, each dataset is walked in shuffled passes like TRL's ``RepeatSampler`` (a pass draws
``generation_batch_size // num_generations`` distinct prompts per round and drops the incomplete tail, as TRL does):
no prompt repeats within a pass. Phase 1 uses the same generator and seed as TRL, so its prompt order is exactly
TRL's.
"""

from __future__ import annotations

import math
import warnings
from typing import Sequence

import torch
from torch.utils.data import Dataset as TorchDataset
from torch.utils.data import IterableDataset as TorchIterableDataset
from torch.utils.data import Sampler
from transformers import TrainerCallback

from .._trl_private import (
    clear_buffered_inputs,
    generation_budget,
    group_shape,
    has_metrics,
    log_metric,
    num_iterations,
    replace_train_sampler,
    set_generation_budget,
    set_group_shape,
    shuffles_dataset,
    uses_vllm,
)

__all__ = ["AnnealingCurriculumCallback", "CurriculumDataset", "CurriculumSampler", "first_anneal_step"]

PHASE_METRIC = "entropy_control/curriculum_phase"


def _is_iterable_dataset(dataset) -> bool:
    try:
        from datasets import IterableDataset as HFIterableDataset
    except ImportError:  # pragma: no cover
        HFIterableDataset = ()
    return isinstance(dataset, (TorchIterableDataset, HFIterableDataset))


class CurriculumDataset(TorchDataset):
    """Rows ``0 .. len(first)-1`` are the first dataset, the following rows the second (no copy, no column merge)."""

    def __init__(self, first, second):
        self.datasets = (first, second)
        self.offsets = (0, len(first))

    def __len__(self) -> int:
        return len(self.datasets[0]) + len(self.datasets[1])

    def __getitem__(self, index: int):
        index = int(index)
        if index < self.offsets[1]:
            return self.datasets[0][index]
        return self.datasets[1][index - self.offsets[1]]


class CurriculumSampler(Sampler[int]):
    """TRL's ``RepeatSampler`` ordering for a two-phase run, over a :class:`CurriculumDataset`.

    The stream is a sequence of generation rounds. Round ``k`` belongs to phase 1 if ``k >= switch_round`` (never
    if ``switch_round`` is None), else phase 0. A round of phase ``p`` takes the next ``generation_batch_size //
    num_generations[p]`` distinct prompts of phase ``p``'s current shuffled pass, repeats each
    ``num_generations[p]`` times in a row, and repeats that whole chunk ``repeat_count`` times (one dataloader batch
    per micro-step, as TRL). The stream stops after ``length`` indices.

    Args:
        phase_sizes: rows of the phase-0 and phase-1 datasets.
        num_generations: group size of each phase.
        generation_batch_size: indices per round and per repeat (TRL's ``args.generation_batch_size``).
        repeat_count: ``num_iterations * steps_per_generation``.
        switch_round: index of the first phase-1 round, or None.
        length: total number of indices (``max_steps * gradient_accumulation_steps * generation_batch_size``).
        shuffle, seed: as TRL; phase 0 uses ``seed`` (so its order equals TRL's), phase 1 ``seed + 1``.
    """

    def __init__(
        self,
        phase_sizes: Sequence[int],
        num_generations: Sequence[int],
        generation_batch_size: int,
        repeat_count: int,
        switch_round: int | None,
        length: int,
        shuffle: bool = True,
        seed: int | None = 0,
    ):
        self.phase_sizes = tuple(int(n) for n in phase_sizes)
        self.num_generations = tuple(int(g) for g in num_generations)
        self.generation_batch_size = int(generation_batch_size)
        self.repeat_count = int(repeat_count)
        self.switch_round = switch_round
        self.length = int(length)
        self.shuffle = shuffle
        self.seed = 0 if seed is None else int(seed)
        for p in (0, 1):
            g = self.num_generations[p]
            if self.generation_batch_size % g != 0:
                raise ValueError(
                    f"num_generations={g} does not divide generation_batch_size={self.generation_batch_size}."
                )
            if self.phase_sizes[p] < self.generation_batch_size // g:
                raise ValueError(
                    f"The phase-{p + 1} dataset has {self.phase_sizes[p]} rows, fewer than the "
                    f"generation_batch_size // num_generations = {self.generation_batch_size // g} distinct prompts "
                    "of one generation batch."
                )

    def __len__(self) -> int:
        return self.length

    def phase_of_round(self, k: int) -> int:
        return 1 if self.switch_round is not None and k >= self.switch_round else 0

    def _passes(self, phase: int):
        """Endless chunks of distinct prompts (local row numbers), pass after pass, each pass a fresh permutation."""
        n = self.phase_sizes[phase]
        unique = self.generation_batch_size // self.num_generations[phase]
        generator = torch.Generator()
        generator.manual_seed(self.seed + phase)
        while True:
            order = torch.randperm(n, generator=generator).tolist() if self.shuffle else list(range(n))
            for start in range(0, n - unique + 1, unique):  # drop the incomplete tail, as RepeatSampler does
                yield order[start : start + unique]

    def __iter__(self):
        # Fresh generators on every iteration: the stream is a pure function of the arguments (resume-safe).
        chunks = (self._passes(0), self._passes(1))
        offsets = (0, self.phase_sizes[0])
        emitted = 0
        k = 0
        while emitted < self.length:
            phase = self.phase_of_round(k)
            chunk = next(chunks[phase])
            g = self.num_generations[phase]
            for _ in range(self.repeat_count):
                for index in chunk:
                    for _ in range(g):
                        yield offsets[phase] + index
                        emitted += 1
                        if emitted >= self.length:
                            return
            k += 1


def first_anneal_step(schedule, total_steps: int) -> int | None:
    """The first optimizer step in ``[0, total_steps)`` whose schedule phase is ``"anneal"``, or None."""
    for step in range(total_steps):
        if schedule.phase(step, total_steps) == "anneal":
            return step
    return None


def _check_positive_int(name: str, value, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")


class AnnealingCurriculumCallback(TrainerCallback):
    """Switch data, rollouts per prompt and completion budget when entropy annealing starts (Wang et al. section 5).

    Attach it to the trainer *before* ``train()`` (the dataloader is built at the start of ``train()``)::

        curriculum = AnnealingCurriculumCallback(train_dataset=hard_problems, num_generations=32,
                                                 max_completion_length=16384)
        curriculum.attach(trainer)          # validates, installs the two-phase sampler, adds the callback
        trainer.train()

    With a :class:`~trl_entropy.GRPOEntropyTrainer` that has an entropy schedule, phase 2 starts at the first step
    whose schedule phase is ``"anneal"`` (for ``wsd``: the last ``entropy_schedule_anneal_ratio`` of training).
    With ``at_step`` (or a plain ``GRPOTrainer``), phase 2 starts at that optimizer step. A step that is not a
    generation-round boundary is rounded up to the next one (with a warning); the final step is ``switch_step``.

    Logs ``entropy_control/curriculum_phase`` (0 before the switch, 1 after) every step.

    Args:
        train_dataset: the phase-2 dataset (map-style, same prompt format). None keeps the phase-1 dataset.
        num_generations: rollouts per prompt in phase 2 (None keeps the trainer's). Must divide
            ``generation_batch_size``.
        max_completion_length: completion budget in phase 2 (None keeps the trainer's).
        at_step: optimizer step (``global_step``) at which phase 2 starts; overrides the schedule.
        schedule: an entropy schedule deciding the switch (default: the trainer's ``entropy_schedule``).
        trainer: if given, :meth:`attach` is called at once.
    """

    def __init__(
        self,
        train_dataset=None,
        num_generations: int | None = None,
        max_completion_length: int | None = None,
        at_step: int | None = None,
        schedule=None,
        trainer=None,
    ):
        _check_positive_int("num_generations", num_generations, 2)
        _check_positive_int("max_completion_length", max_completion_length, 1)
        _check_positive_int("at_step", at_step, 0)
        if train_dataset is not None:
            if _is_iterable_dataset(train_dataset) or not hasattr(train_dataset, "__len__"):
                raise ValueError(
                    "train_dataset must be a map-style dataset (with __len__ and indexing); iterable datasets are "
                    "not supported by the annealing curriculum."
                )
            if len(train_dataset) == 0:
                raise ValueError("train_dataset (phase 2) is empty.")
        self.train_dataset = train_dataset
        self.num_generations = num_generations
        self.max_completion_length = max_completion_length
        self.at_step = at_step
        self.schedule = schedule
        self.trainer = None
        self.switch_step: int | None = None  # resolved at the start of train()
        self.phase: int | None = None  # phase applied to the trainer
        self.sampler: CurriculumSampler | None = None
        if trainer is not None:
            self.attach(trainer)

    # ------------------------------------------------------------------ setup
    def attach(self, trainer) -> "AnnealingCurriculumCallback":
        """Validate against ``trainer``, install the two-phase dataset and sampler, and add this callback."""
        if self.trainer is not None:
            if self.trainer is trainer:
                return self
            raise ValueError("This AnnealingCurriculumCallback is already attached to another trainer.")
        args = trainer.args
        first = trainer.train_dataset
        if first is None or _is_iterable_dataset(first) or not hasattr(first, "__len__"):
            raise ValueError(
                "The trainer's train_dataset must be a map-style dataset; the annealing curriculum does not support "
                "iterable datasets."
            )
        if isinstance(first, CurriculumDataset):
            raise ValueError("The trainer already has an annealing curriculum attached.")
        if args.max_steps is None or args.max_steps <= 0:
            raise ValueError(
                f"max_steps must be set (> 0) to use the annealing curriculum, got {args.max_steps}: the phase "
                "boundary and the data stream are defined over a fixed number of optimizer steps."
            )
        g1, l1 = group_shape(trainer)
        g2 = self.num_generations or g1
        l2 = self.max_completion_length or l1
        gbs = args.generation_batch_size
        if gbs % g2 != 0:
            raise ValueError(
                f"num_generations={g2} does not divide generation_batch_size={gbs} (= per_device_train_batch_size x "
                "num_processes x steps_per_generation); pick a divisor or a larger generation batch."
            )
        second = self.train_dataset if self.train_dataset is not None else first
        for name, data, g in (("the trainer's train_dataset", first, g1), ("train_dataset", second, g2)):
            if len(data) < gbs // g:
                raise ValueError(
                    f"{name} has {len(data)} rows, fewer than the generation_batch_size // num_generations = "
                    f"{gbs // g} distinct prompts one generation batch needs."
                )
        vllm_max = args.vllm_max_model_length if uses_vllm(trainer) else None
        if vllm_max is not None and l2 >= vllm_max:
            raise ValueError(
                f"max_completion_length={l2} does not fit vllm_max_model_length={vllm_max} (prompt + completion): "
                "raise vllm_max_model_length (vLLM's context is fixed when the engine starts)."
            )
        if self.at_step is None:
            self.schedule = self.schedule or getattr(trainer, "entropy_schedule", None)
            if self.schedule is None:
                raise ValueError(
                    "at_step is None and the trainer has no entropy schedule: pass at_step=<optimizer step> or "
                    "schedule=, or use a GRPOEntropyTrainer with entropy_schedule set."
                )
        self.trainer = trainer
        self._phase_values = (
            {"num_generations": g1, "max_completion_length": l1},
            {"num_generations": g2, "max_completion_length": l2},
        )
        # every budget TRL's generation reads (through _trl_private: a renamed one raises, never a silent no-op)
        self._budget0 = generation_budget(trainer)
        trainer.train_dataset = CurriculumDataset(first, second)
        replace_train_sampler(trainer, self._train_sampler)  # TRL's hook; its get_train_dataloader stays as is
        if self not in trainer.callback_handler.callbacks:
            trainer.add_callback(self)
        return self

    def resolve_switch_step(self) -> int | None:
        """The optimizer step at which phase 2 starts (rounded up to a round boundary), or None if never."""
        trainer = self.trainer
        args = trainer.args
        total = args.max_steps
        if self.at_step is not None:
            requested = self.at_step
        else:
            requested = first_anneal_step(self.schedule, total)
            if requested is None:
                warnings.warn(
                    f"The entropy schedule never enters its annealing phase within max_steps={total}: the "
                    "annealing curriculum never switches.",
                    UserWarning,
                    stacklevel=3,
                )
                return None
        round_micro = args.steps_per_generation * num_iterations(trainer)
        grad_accum = args.gradient_accumulation_steps
        unit = math.lcm(round_micro, grad_accum) // grad_accum  # optimizer steps between common boundaries
        step = -(-requested // unit) * unit
        if step != requested:
            warnings.warn(
                f"The curriculum switch was requested at step {requested}, which is not a generation-round "
                f"boundary (steps_per_generation x num_iterations = {round_micro} micro-batches, "
                f"gradient_accumulation_steps = {grad_accum}); it happens at step {step}.",
                UserWarning,
                stacklevel=3,
            )
        if step >= total:
            warnings.warn(
                f"The curriculum switch step {step} is not before max_steps={total}: it never happens.",
                UserWarning,
                stacklevel=3,
            )
            return None
        return step

    def _train_sampler(self, dataset=None) -> CurriculumSampler:
        trainer = self.trainer
        args = trainer.args
        self.switch_step = self.resolve_switch_step()
        round_micro = args.steps_per_generation * num_iterations(trainer)
        grad_accum = args.gradient_accumulation_steps
        switch_round = None if self.switch_step is None else self.switch_step * grad_accum // round_micro
        data = trainer.train_dataset
        self.sampler = CurriculumSampler(
            phase_sizes=(len(data.datasets[0]), len(data.datasets[1])),
            num_generations=(self._phase_values[0]["num_generations"], self._phase_values[1]["num_generations"]),
            generation_batch_size=args.generation_batch_size,
            repeat_count=round_micro,
            switch_round=switch_round,
            length=args.max_steps * grad_accum * args.generation_batch_size,
            shuffle=shuffles_dataset(trainer),
            seed=args.seed,
        )
        return self.sampler

    # ------------------------------------------------------------------ phase
    def phase_at(self, step: int) -> int:
        return 1 if self.switch_step is not None and step >= self.switch_step else 0

    def _apply(self, phase: int) -> None:
        trainer = self.trainer
        if phase == self.phase:
            return
        values = self._phase_values[phase]
        set_group_shape(trainer, values["num_generations"], values["max_completion_length"])
        # Generation budget: phase 1 restores what the trainer had when attached (a user's max_new_tokens in
        # generation_kwargs included); phase 2 sets the new max_completion_length everywhere TRL reads it.
        budget = self._budget0 if phase == 0 else dict.fromkeys(self._budget0, values["max_completion_length"])
        set_generation_budget(trainer, budget)
        if self.phase is not None:
            # A switch inside a run: the round boundary already makes TRL regenerate; dropping the buffer makes
            # sure no rollout of the old phase is trained on after the switch.
            clear_buffered_inputs(trainer)
        self.phase = phase
        trainer.curriculum_phase = phase

    def on_train_begin(self, args, state, control, **kwargs):
        if self.trainer is None or self.sampler is None:
            raise RuntimeError(
                "AnnealingCurriculumCallback was not attached before train(): call callback.attach(trainer) "
                "(or pass trainer=) before trainer.train(), so the two-phase sampler is installed."
            )
        self.phase = None
        self._apply(self.phase_at(state.global_step))

    def on_step_begin(self, args, state, control, **kwargs):
        self._apply(self.phase_at(state.global_step))
        if has_metrics(self.trainer):
            log_metric(self.trainer, PHASE_METRIC, float(self.phase))
