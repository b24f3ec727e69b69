"""The initial entropy measured to a stated precision, for a schedule written relative to it (``"initial"``).

The first generation batch gives the starting policy's token-mean entropy and its standard error (the spread of its
completions, :func:`~trl_entropy.scheduling.measurement.measurement_standard_error`). Where that error is above
:data:`~trl_entropy.scheduling.targets.INITIAL_PRECISION` of the value, the same prompts are sampled again, aside from
training (TRL's own generation, vLLM included; nothing is trained on them and TRL's metrics are left as they were),
and the rounds are pooled until the error is within the precision or :data:`MAX_ROUNDS` extra rounds have run. Every
decision is taken on values summed over processes, so every rank runs the same rounds.
"""

from __future__ import annotations

import torch

from .._trl_private import generate_aside, per_token_logps_and_entropies
from ..scheduling.measurement import global_mean_and_error, pool_estimates
from ..scheduling.targets import INITIAL_PRECISION

__all__ = ["MAX_ROUNDS", "precise_initial_entropy"]

MAX_ROUNDS = 8  # extra generation rounds at most (a batch of n completions pooled 9x: its error / 3)


def _pad(rows: list, value: int, left: bool, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), value, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for i, row in enumerate(rows):
        if row:
            cols = slice(width - len(row), width) if left else slice(0, len(row))
            ids[i, cols] = torch.tensor(row, dtype=torch.long, device=device)
            mask[i, cols] = 1
    return ids, mask


def _round(trainer, prompts: list) -> tuple[float | None, float | None, float]:
    """One aside generation on ``prompts``: the policy's (global) token-mean entropy, its error and token count."""
    prompt_ids, completion_ids = generate_aside(trainer, prompts)
    device = trainer.accelerator.device
    pad = trainer.processing_class.pad_token_id if hasattr(trainer.processing_class, "pad_token_id") else None
    pad = 0 if pad is None else pad
    p_ids, p_mask = _pad(prompt_ids, pad, True, device)
    c_ids, c_mask = _pad(completion_ids, pad, False, device)
    with torch.no_grad():
        _, entropies, _ = per_token_logps_and_entropies(
            trainer, trainer.model, torch.cat([p_ids, c_ids], dim=1), torch.cat([p_mask, c_mask], dim=1),
            c_ids.size(1), batch_size=trainer.args.per_device_train_batch_size, compute_entropy=True)
    return global_mean_and_error(entropies, c_mask, trainer.accelerator.reduce)


def precise_initial_entropy(trainer, inputs, entropy: float, error: float | None, tokens: float
                            ) -> tuple[float, float | None, int]:
    """``(entropy, standard error, extra rounds)``: the first batch's measurement, pooled with aside rounds on the
    same prompts (``inputs``: the batch's rows) while its error is above ``INITIAL_PRECISION`` of the value. Rows with
    images, or a trainer with tools, are not sampled again (their generation needs more than the prompt)."""
    prompts = [row.get("prompt") for row in inputs or []]
    if (error is None or error <= INITIAL_PRECISION * entropy or not prompts or None in prompts
            or getattr(trainer, "tools", None) or any("image" in row or "images" in row for row in inputs)):
        return entropy, error, 0
    estimates, rounds = [(entropy, error, tokens)], 0
    while rounds < MAX_ROUNDS and (error is None or error > INITIAL_PRECISION * entropy):
        mean, se, count = _round(trainer, prompts)
        rounds += 1
        if mean is None or se is None:
            continue
        estimates.append((mean, se, count))
        entropy, error = pool_estimates(estimates)
    return entropy, error, rounds
