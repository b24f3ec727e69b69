"""A GRPO policy loss with per-token hooks, equal to TRL's ``GRPOTrainer._compute_loss`` when the hooks are off.

Why this module exists. Clip-Cov and KL-Cov change the loss *per token*, which TRL's
``_compute_loss`` cannot do from the outside. Instead of forking that method, the loss is rebuilt here from small
named functions (in the style of verl's ``core_algos.py``), each a pure function on tensors:

* :func:`log_importance_weights` -- log-ratio at token level (B, T) or sequence level (B, 1, GSPO);
* :func:`clipped_surrogate` -- PPO clipped surrogate ``-min(r A, clip(r) A)``, optional two-sided cap ``delta``;
* :func:`apply_token_hooks` -- the entropy-control hooks of :class:`TokenHooks` (KL-Cov, weights, Clip-Cov);
* :func:`per_token_policy_loss` -- the three above in order;
* :func:`reference_kl` -- k3 estimator of KL(pi_theta || pi_ref), optionally importance-corrected;
* :func:`off_policy_sequence_mask` -- DeepSeek-V3.2 off-policy sequence mask (TRL ``off_policy_mask_threshold``);
* :func:`aggregate_loss` -- TRL's normalisation of each ``loss_type``;
* :func:`entropy_bonus` -- TRL's static entropy bonus term (mean entropy over the loss tokens);
* :func:`compute_grpo_loss` -- the whole path from per-token log-probs and TRL's ``inputs`` dict;

and :func:`trainer_compute_loss`, a drop-in for ``GRPOTrainer._compute_loss(model, inputs)`` that a subclass calls to
get the loss with hooks (it runs TRL's own forward and logs TRL's metrics under the same names).

EntroPIC's hooks only add a term to the aggregated loss (``adjust_mask``, ``adjust_alpha``): the trainer keeps TRL's
own ``_compute_loss`` for it and adds :func:`additive_hooks_loss`, computed from the log-probs of TRL's loss forward
(equal to what :func:`compute_grpo_loss` adds).

Equality with TRL (trl 1.16): with ``hooks=None`` (or hooks that select nothing and weights of one) the loss and its
gradient equal TRL's for loss types ``grpo``, ``bnpo``, ``dr_grpo``, ``dapo``, ``luspo``; importance-sampling level
``token`` and ``sequence``; ``delta``; the reference KL (``beta != 0``, with or without ``use_bias_correction_kl``);
the vLLM importance-sampling correction (token or sequence shaped ratio); ``top_entropy_quantile < 1``;
``off_policy_mask_threshold``; the static entropy bonus; train and eval mode. ``tests/test_policy_loss.py`` checks
this against a real ``trl.GRPOTrainer``.

Where the hooks act. The hooks change the policy surrogate only, before TRL's sequence/entropy masks, the vLLM
importance-sampling factor and the reference-KL term are applied (in verl, whose methods these are, the KL loss is a
separate term that Clip-Cov and KL-Cov do not touch). Hook-modified tokens stay in every normaliser.

Not supported (:func:`trainer_compute_loss` raises ``NotImplementedError``): loss types ``cispo``, ``sapo``,
``vespo``; the adaptive entropy coefficient (``use_adaptive_entropy``); the MoE router auxiliary loss; multimodal
inputs (``pixel_values`` and the other image keys).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from .._trl_private import entropy_bonus_enabled, log_metric, nanmax, nanmin, per_token_logps_and_entropies

__all__ = [
    "SUPPORTED_LOSS_TYPES",
    "GRPOLossConfig",
    "TokenHooks",
    "additive_hooks_loss",
    "aggregate_loss",
    "apply_token_hooks",
    "check_trainer_supported",
    "clipped_surrogate",
    "compute_grpo_loss",
    "entropy_bonus",
    "high_prob_adjustment",
    "log_importance_weights",
    "loss_mask",
    "off_policy_sequence_mask",
    "per_token_policy_loss",
    "reference_kl",
    "trainer_compute_loss",
]

#: Loss types this module computes (their surrogate is TRL's PPO-clipped one; they differ in normalisation).
SUPPORTED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
#: Loss types TRL has but this module does not implement (their surrogate is not the clipped one).
UNSUPPORTED_TRL_LOSS_TYPES = ("cispo", "sapo", "vespo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
#: Input keys of vision-language batches; their presence means a multimodal forward, which is not supported here.
MULTIMODAL_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


# --------------------------------------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------------------------------------


def _check_loss_type(loss_type: str) -> None:
    if loss_type in UNSUPPORTED_TRL_LOSS_TYPES:
        raise NotImplementedError(
            f"loss_type={loss_type!r} is not supported by trl_entropy's policy loss (supported: "
            f"{', '.join(SUPPORTED_LOSS_TYPES)}). Use one of those with token-level entropy controls."
        )
    if loss_type not in SUPPORTED_LOSS_TYPES:
        raise ValueError(f"Unknown loss_type={loss_type!r}; supported: {', '.join(SUPPORTED_LOSS_TYPES)}.")


def _check_level(level: str) -> None:
    if level not in IMPORTANCE_SAMPLING_LEVELS:
        raise ValueError(
            f"Unknown importance_sampling_level={level!r}; possible values: {', '.join(IMPORTANCE_SAMPLING_LEVELS)}."
        )


def _as_2d_advantages(advantages: Tensor) -> Tensor:
    """Sequence advantages (B,) become (B, 1); token advantages (B, T) and (B, 1) are returned as they are."""
    if advantages.dim() == 1:
        return advantages.unsqueeze(1)
    if advantages.dim() != 2:
        raise ValueError(f"advantages must have shape (B,), (B, 1) or (B, T), got {tuple(advantages.shape)}.")
    return advantages


# --------------------------------------------------------------------------------------------------------------------
# token hooks
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class TokenHooks:
    """Per-token changes to the policy surrogate; every field is optional (``None`` = off).

    Attributes:
        token_weights: (B, T) multiplicative weights on the per-token surrogate (read detached), e.g. EntroPIC's
            ``1 ± alpha`` on confident tokens.
        detach_mask: (B, T) bool, Clip-Cov: the surrogate of these tokens is set to 0 (no value, no gradient); they
            stay in the normaliser, as in verl where the loss is multiplied by 0.
        kl_cov_mask: (B, T) bool, KL-Cov: on these tokens the surrogate is ``-A * r + kl_cov_coef * |logp - old|``
            with the unclipped ratio ``r`` (no PPO clip and no ``delta`` cap).
        kl_cov_coef: KL-Cov coefficient (verl ``ppo_kl_coef``), finite and >= 0.
        adjust_mask: (B, T) bool, EntroPIC: the high-probability tokens of the additive adjustment
            ``adjust_alpha * mean_{adjust_mask}(-r * |A|)`` (``r`` the unclipped importance ratio, the mean over the
            loss tokens in ``adjust_mask`` of the micro-batch, divided by the gradient-accumulation steps in training
            like TRL's entropy bonus, independent of ``loss_type``). Not part of the per-token surrogate: it is added
            to the aggregated loss by :func:`compute_grpo_loss` (or, alone, by :func:`additive_hooks_loss`).
        adjust_alpha: EntroPIC's alpha, finite; 0 switches the adjustment off.

    Order: KL-Cov replaces the surrogate, then the weights multiply it, then Clip-Cov zeroes it (a token in both
    masks is zeroed).
    """

    token_weights: Tensor | None = None
    detach_mask: Tensor | None = None
    kl_cov_mask: Tensor | None = None
    kl_cov_coef: float = 1.0
    adjust_mask: Tensor | None = None
    adjust_alpha: float = 0.0

    def validate(self, shape: tuple[int, int]) -> None:
        """Raise ``ValueError`` if a tensor field does not have the (B, T) ``shape`` or the coefficient is invalid."""
        for name in ("token_weights", "detach_mask", "kl_cov_mask", "adjust_mask"):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, Tensor):
                raise ValueError(f"TokenHooks.{name} must be a torch.Tensor or None, got {type(value).__name__}.")
            if tuple(value.shape) != tuple(shape):
                raise ValueError(f"TokenHooks.{name} must have shape {tuple(shape)}, got {tuple(value.shape)}.")
        coef = float(self.kl_cov_coef)
        if not math.isfinite(coef) or coef < 0:
            raise ValueError(f"TokenHooks.kl_cov_coef must be finite and >= 0, got {self.kl_cov_coef}.")
        if not math.isfinite(float(self.adjust_alpha)):
            raise ValueError(f"TokenHooks.adjust_alpha must be finite, got {self.adjust_alpha}.")


def apply_token_hooks(
    per_token_loss: Tensor,
    hooks: TokenHooks | None,
    *,
    advantages: Tensor,
    ratio: Tensor,
    log_ratio: Tensor,
) -> Tensor:
    """Apply :class:`TokenHooks` to a per-token surrogate.

    Args:
        per_token_loss: (B, T) or (B, 1) surrogate from :func:`clipped_surrogate`.
        hooks: the hooks, or ``None`` (then ``per_token_loss`` is returned unchanged).
        advantages: (B, 1) or (B, T).
        ratio: unclipped, uncapped importance ratio, (B, T) or (B, 1) (sequence level).
        log_ratio: (B, T) token log-ratio ``logp - old_logp`` (KL-Cov's penalty is token-level at either IS level).

    Returns:
        The modified loss, (B, T) as soon as one hook is set, else ``per_token_loss`` itself.
    """
    if hooks is None:
        return per_token_loss
    hooks.validate(tuple(log_ratio.shape))
    loss = per_token_loss
    if hooks.kl_cov_mask is not None:
        kl_cov_loss = -advantages * ratio + float(hooks.kl_cov_coef) * log_ratio.abs()
        loss = torch.where(hooks.kl_cov_mask.to(loss.device).bool(), kl_cov_loss, loss)
    if hooks.token_weights is not None:
        loss = loss * hooks.token_weights.detach().to(device=loss.device, dtype=loss.dtype)
    if hooks.detach_mask is not None:
        loss = torch.where(hooks.detach_mask.to(loss.device).bool(), torch.zeros_like(loss), loss)
    return loss


# --------------------------------------------------------------------------------------------------------------------
# surrogate
# --------------------------------------------------------------------------------------------------------------------


def log_importance_weights(log_ratio: Tensor, mask: Tensor, level: str) -> Tensor:
    """Log importance weights from the token log-ratio ``logp - old_logp`` (B, T).

    ``"token"``: the log-ratio itself, (B, T). ``"sequence"`` (GSPO): its mean over the sequence's loss tokens,
    (B, 1) (a sequence without loss tokens gets 0).
    """
    _check_level(level)
    if level == "token":
        return log_ratio
    n_tokens = mask.sum(-1).clamp(min=1.0)
    return ((log_ratio * mask).sum(-1) / n_tokens).unsqueeze(-1)


def clipped_surrogate(
    coef_1: Tensor, advantages: Tensor, *, epsilon_low: float, epsilon_high: float, delta: float | None = None
) -> tuple[Tensor, Tensor]:
    """PPO clipped surrogate ``-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)``.

    With ``delta`` (two-sided GRPO), the unclipped ratio is also capped at ``delta`` (the clipped one is computed
    from the uncapped ratio, as in TRL).

    Args:
        coef_1: importance ratio, (B, T) or (B, 1).
        advantages: (B, 1) or (B, T).

    Returns:
        ``(per_token_loss, ratio)``: the loss (broadcast shape of the inputs) and the ratio after the ``delta`` cap
        (the one TRL's clip metrics read).
    """
    clipped_ratio = torch.clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)
    if delta is not None:
        coef_1 = torch.clamp(coef_1, max=delta)
    unclipped_term = coef_1 * advantages
    clipped_term = clipped_ratio * advantages
    return -torch.min(unclipped_term, clipped_term), coef_1


def per_token_policy_loss(
    per_token_logps: Tensor,
    old_per_token_logps: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    importance_sampling_level: str = "token",
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    delta: float | None = None,
    hooks: TokenHooks | None = None,
) -> tuple[Tensor, Tensor]:
    """Per-token policy loss: importance ratio, clipped surrogate, then the token hooks.

    Args:
        per_token_logps: (B, T) log-probs of the current policy (with gradient).
        old_per_token_logps: (B, T) log-probs of the sampling policy (no gradient).
        advantages: (B,), (B, 1) or (B, T).
        mask: (B, T) loss mask (1 on completion tokens that count).
        importance_sampling_level: ``"token"`` or ``"sequence"``.
        epsilon_low, epsilon_high: clip range ``[1 - epsilon_low, 1 + epsilon_high]``.
        delta: optional cap on the unclipped ratio.
        hooks: optional :class:`TokenHooks`.

    Returns:
        ``(per_token_loss, coef_1)``: the loss, (B, T), or (B, 1) at sequence level without hooks; and the ratio
        after the ``delta`` cap, (B, T) or (B, 1), for the clip metrics.
    """
    log_ratio = per_token_logps - old_per_token_logps
    ratio = torch.exp(log_importance_weights(log_ratio, mask, importance_sampling_level))
    return _hooked_surrogate(
        ratio, log_ratio, _as_2d_advantages(advantages), epsilon_low, epsilon_high, delta, hooks
    )


def _hooked_surrogate(ratio, log_ratio, advantages, epsilon_low, epsilon_high, delta, hooks):
    """:func:`clipped_surrogate` then :func:`apply_token_hooks`, from an already computed ratio."""
    loss, coef_1 = clipped_surrogate(
        ratio, advantages, epsilon_low=epsilon_low, epsilon_high=epsilon_high, delta=delta
    )
    loss = apply_token_hooks(loss, hooks, advantages=advantages, ratio=ratio, log_ratio=log_ratio)
    return loss, coef_1


# --------------------------------------------------------------------------------------------------------------------
# other per-token terms
# --------------------------------------------------------------------------------------------------------------------


def reference_kl(per_token_logps: Tensor, ref_per_token_logps: Tensor, ratio: Tensor | None = None) -> Tensor:
    """k3 estimator of KL(pi_theta || pi_ref) per token: ``exp(d) - d - 1`` with ``d = ref_logp - logp``.

    If ``ratio`` is given (TRL's ``use_bias_correction_kl``), the estimate is multiplied by the importance ratio
    (uncapped, token (B, T) or sequence (B, 1) level). Returns (B, T).
    """
    d = ref_per_token_logps - per_token_logps
    kl = torch.exp(d) - d - 1
    return kl if ratio is None else kl * ratio


def off_policy_sequence_mask(
    advantages: Tensor, per_token_logps: Tensor, sampling_per_token_logps: Tensor, mask: Tensor, threshold: float
) -> Tensor:
    """Off-policy sequence mask (DeepSeek-V3.2; TRL ``off_policy_mask_threshold``), (B, 1).

    A sequence is kept (1) if its advantage is >= 0 or the mean over its loss tokens of
    ``sampling_logp - logp`` (NaN counted as 0) is <= ``threshold``; else dropped (0).
    """
    advantages = _as_2d_advantages(advantages)
    drift = torch.nan_to_num(sampling_per_token_logps - per_token_logps.detach(), nan=0.0)
    mean_drift = (drift * mask).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1.0)
    keep = (advantages >= 0) | (mean_drift <= threshold)
    return keep.to(dtype=mask.dtype)


# --------------------------------------------------------------------------------------------------------------------
# aggregation
# --------------------------------------------------------------------------------------------------------------------


def aggregate_loss(
    per_token_loss: Tensor,
    mask: Tensor,
    *,
    loss_type: str,
    gradient_accumulation_steps: int = 1,
    num_items_in_batch: Tensor | float | None = None,
    num_processes: int = 1,
    steps_per_generation: int = 1,
    max_completion_length: int | None = None,
    training: bool = True,
) -> tuple[Tensor, Tensor]:
    """Reduce a per-token loss to the scalar TRL backpropagates, for each ``loss_type``.

    With ``GA = gradient_accumulation_steps`` in training and 1 in eval, and ``S = sum(loss * mask)``:

    * ``grpo``: mean over sequences of the per-sequence token mean, / GA;
    * ``bnpo``: ``S / sum(mask)``, / GA;
    * ``dr_grpo``: ``S / (B * max_completion_length)``, / GA;
    * ``dapo``: ``S / N`` with ``N = num_items_in_batch / num_processes`` (loss tokens of the generation batch per
      process), times ``GA / steps_per_generation`` in training (one accumulation window's share);
    * ``luspo``: mean over sequences of the per-sequence token sum, / GA.

    Args:
        per_token_loss: (B, T) or (B, 1) (broadcast against ``mask``).
        mask: (B, T) loss mask.

    Returns:
        ``(loss, policy_loss)``: the loss to backpropagate and the detached policy loss TRL logs (before the GA
        division for all types but ``dapo``, where it is the loss itself).
    """
    _check_loss_type(loss_type)
    accumulation = gradient_accumulation_steps if training else 1.0
    masked = per_token_loss * mask
    if loss_type == "dapo":
        if num_items_in_batch is None:
            raise ValueError("loss_type='dapo' needs num_items_in_batch (TRL's inputs['num_items_in_batch']).")
        if not isinstance(num_items_in_batch, Tensor):
            num_items_in_batch = torch.tensor(float(num_items_in_batch), device=per_token_loss.device)
        normalizer = num_items_in_batch.clamp(min=1.0) / num_processes
        if training:
            normalizer = normalizer * gradient_accumulation_steps / steps_per_generation
        loss = masked.sum() / normalizer
        return loss, loss.detach()
    if loss_type == "grpo":
        loss = (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        loss = masked.sum() / mask.sum().clamp(min=1.0)
    elif loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("loss_type='dr_grpo' needs max_completion_length.")
        loss = masked.sum() / (per_token_loss.size(0) * max_completion_length)
    else:  # luspo
        loss = masked.sum(-1).mean()
    return loss / accumulation, loss.detach()


def entropy_bonus(
    entropies: Tensor, mask: Tensor, *, gradient_accumulation_steps: int = 1, training: bool = True
) -> Tensor:
    """Mean per-token entropy over ``mask`` (divided by GA in training): the ``H`` of ``L = L_policy - coef * H``.

    As in TRL, the mean does not depend on the loss type's normaliser. Returns a scalar with gradient.
    """
    accumulation = gradient_accumulation_steps if training else 1.0
    return (entropies * mask).sum() / mask.sum().clamp(min=1.0) / accumulation


def high_prob_adjustment(
    ratio: Tensor, advantages: Tensor, adjust_mask: Tensor, *, gradient_accumulation_steps: int = 1, training: bool = True
) -> Tensor:
    """EntroPIC's adjustment term ``mean_{adjust_mask}(-r * |A|)`` (divided by GA in training), without alpha.

    ``ratio`` is the unclipped importance ratio, (B, T) or (B, 1) (sequence level, broadcast); ``advantages`` (B, 1)
    or (B, T); ``adjust_mask`` (B, T), the loss tokens the term covers (EntroPIC: probability above a threshold). An
    empty mask gives 0. Normalised one way for every ``loss_type``, as TRL's entropy bonus.
    """
    accumulation = gradient_accumulation_steps if training else 1.0
    per_token = -ratio * advantages.abs()
    return (per_token * adjust_mask).sum() / adjust_mask.sum().clamp(min=1.0) / accumulation


# --------------------------------------------------------------------------------------------------------------------
# the whole path
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GRPOLossConfig:
    """The scalar settings of :func:`compute_grpo_loss` (the fields TRL's ``_compute_loss`` reads off the trainer).

    ``vllm_importance_sampling_correction`` means "multiply by ``inputs['importance_sampling_ratio']``", i.e. TRL's
    ``use_vllm and vllm_importance_sampling_correction``. ``entropy_coef`` is the static bonus coefficient (0 = off).
    ``entropy_bonus_enabled`` is TRL's ``_entropy_bonus_enabled``: the bonus term is applied, and ``policy_loss`` and
    ``entropy_coef`` are logged, also at a coefficient of 0, as TRL does once a control switched its bonus on (a
    non-zero ``entropy_coef`` applies the term whatever this flag).
    """

    loss_type: str = "dapo"
    importance_sampling_level: str = "token"
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    delta: float | None = None
    beta: float = 0.0
    use_bias_correction_kl: bool = True
    vllm_importance_sampling_correction: bool = False
    off_policy_mask_threshold: float | None = None
    entropy_coef: float = 0.0
    entropy_bonus_enabled: bool = False
    max_completion_length: int | None = None
    gradient_accumulation_steps: int = 1
    num_processes: int = 1
    steps_per_generation: int = 1
    training: bool = True

    def __post_init__(self):
        _check_loss_type(self.loss_type)
        _check_level(self.importance_sampling_level)

    @classmethod
    def from_trainer(cls, trainer) -> GRPOLossConfig:
        """Read the settings off a ``trl.GRPOTrainer`` (call :func:`check_trainer_supported` first)."""
        training = bool(trainer.model.training)
        return cls(
            loss_type=trainer.loss_type,
            importance_sampling_level=trainer.importance_sampling_level,
            epsilon_low=trainer.epsilon_low,
            epsilon_high=trainer.epsilon_high,
            delta=trainer.args.delta,
            beta=trainer.beta,
            use_bias_correction_kl=trainer.args.use_bias_correction_kl,
            vllm_importance_sampling_correction=bool(trainer.use_vllm and trainer.vllm_importance_sampling_correction),
            off_policy_mask_threshold=trainer.off_policy_mask_threshold,
            entropy_coef=trainer.entropy_coef if entropy_bonus_enabled(trainer) else 0.0,
            entropy_bonus_enabled=entropy_bonus_enabled(trainer),
            max_completion_length=trainer.max_completion_length,
            # only defined inside Trainer's training loop; eval does not use it
            gradient_accumulation_steps=getattr(trainer, "current_gradient_accumulation_steps", 1) if training else 1,
            num_processes=trainer.accelerator.num_processes,
            steps_per_generation=trainer.args.steps_per_generation,
            training=training,
        )


def _bonus_applies(config: GRPOLossConfig) -> bool:
    """Whether the entropy bonus term is in the loss (and ``policy_loss``/``entropy_coef`` are logged)."""
    return config.entropy_bonus_enabled or config.entropy_coef != 0.0


def loss_mask(inputs: Mapping[str, Tensor]) -> Tensor:
    """TRL's loss mask: ``completion_mask``, times ``tool_mask`` when present (B, T)."""
    mask = inputs["completion_mask"]
    return mask if "tool_mask" not in inputs else mask * inputs["tool_mask"]


def compute_grpo_loss(
    per_token_logps: Tensor,
    inputs: Mapping[str, Tensor],
    config: GRPOLossConfig,
    *,
    entropies: Tensor | None = None,
    entropy_mask: Tensor | None = None,
    hooks: TokenHooks | None = None,
) -> dict[str, Tensor | None]:
    """The GRPO loss of one micro-batch, from TRL's ``inputs`` dict.

    Steps: importance ratio and clipped surrogate with hooks (:func:`per_token_policy_loss`); off-policy sequence
    mask (if ``config.off_policy_mask_threshold``); high-entropy token mask (if ``entropy_mask``); vLLM importance
    ratio (if ``config.vllm_importance_sampling_correction``); ``+ beta * KL`` (if ``config.beta``); aggregation
    (:func:`aggregate_loss`); ``- entropy_coef * H`` (if ``config.entropy_coef`` or ``config.entropy_bonus_enabled``).

    Args:
        per_token_logps: (B, T) current log-probs, with gradient.
        inputs: TRL's batch: ``completion_mask``, ``advantages`` (B,) or (B, T); optional ``tool_mask``,
            ``old_per_token_logps`` (absent/None = on-policy: ``per_token_logps.detach()``); as configured
            ``ref_per_token_logps``, ``importance_sampling_ratio`` ((B, T) or (B, 1)), ``num_items_in_batch``
            (dapo), ``sampling_per_token_logps`` (off-policy mask; default the old log-probs).
        config: :class:`GRPOLossConfig`.
        entropies: (B, T) per-token entropies, with gradient (needed for the entropy bonus).
        entropy_mask: optional (B, T) bool mask of the tokens that train (TRL's ``top_entropy_quantile``).
        hooks: optional :class:`TokenHooks`.

    Returns:
        dict with ``loss`` (scalar to backpropagate), ``policy_loss`` (detached, as TRL logs it), ``per_token_loss``
        (before aggregation), ``coef_1`` (ratio for the clip metrics), ``per_token_kl`` (or None), ``mask``,
        ``advantages`` (2-D), ``old_per_token_logps``, ``entropy_mask``.
    """
    mask = loss_mask(inputs)
    advantages = _as_2d_advantages(inputs["advantages"])
    old_per_token_logps = inputs.get("old_per_token_logps")
    if old_per_token_logps is None:
        old_per_token_logps = per_token_logps.detach()

    # the steps of per_token_policy_loss, keeping the ratio for the KL's importance correction
    log_ratio = per_token_logps - old_per_token_logps
    ratio = torch.exp(log_importance_weights(log_ratio, mask, config.importance_sampling_level))
    # (built before the surrogate, as in TRL, so that autograd sums the ratio's gradients in the same order)
    per_token_kl = None
    if config.beta != 0.0:
        # the KL's importance correction uses the ratio before the delta cap
        kl_ratio = ratio if config.use_bias_correction_kl else None
        per_token_kl = reference_kl(per_token_logps, inputs["ref_per_token_logps"], kl_ratio)
    per_token_loss, coef_1 = _hooked_surrogate(
        ratio, log_ratio, advantages, config.epsilon_low, config.epsilon_high, config.delta, hooks
    )

    if config.off_policy_mask_threshold is not None:
        sampling_logps = inputs.get("sampling_per_token_logps", old_per_token_logps)
        per_token_loss = per_token_loss * off_policy_sequence_mask(
            advantages, per_token_logps, sampling_logps, mask, config.off_policy_mask_threshold
        )
    if entropy_mask is not None:
        per_token_loss = per_token_loss * entropy_mask
    if config.vllm_importance_sampling_correction:
        per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]

    if per_token_kl is not None:
        per_token_loss = per_token_loss + config.beta * per_token_kl

    loss, policy_loss = aggregate_loss(
        per_token_loss,
        mask,
        loss_type=config.loss_type,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        num_items_in_batch=inputs.get("num_items_in_batch"),
        num_processes=config.num_processes,
        steps_per_generation=config.steps_per_generation,
        max_completion_length=config.max_completion_length,
        training=config.training,
    )

    if _bonus_applies(config):
        if entropies is None:
            raise ValueError("an entropy bonus (entropy_coef != 0 or entropy_bonus_enabled) needs the entropies.")
        bonus_mask = mask if entropy_mask is None else mask * entropy_mask
        loss = loss - config.entropy_coef * entropy_bonus(
            entropies,
            bonus_mask,
            gradient_accumulation_steps=config.gradient_accumulation_steps,
            training=config.training,
        )

    adjustment = _adjustment_term(
        hooks, ratio, advantages, mask, gradient_accumulation_steps=config.gradient_accumulation_steps,
        training=config.training,
    )
    if adjustment is not None:
        loss = loss + adjustment

    return {
        "loss": loss,
        "policy_loss": policy_loss,
        "per_token_loss": per_token_loss,
        "coef_1": coef_1,
        "per_token_kl": per_token_kl,
        "mask": mask,
        "advantages": advantages,
        "old_per_token_logps": old_per_token_logps,
        "entropy_mask": entropy_mask,
    }


def _adjustment_term(hooks, ratio, advantages, mask, *, gradient_accumulation_steps, training) -> Tensor | None:
    """``adjust_alpha * high_prob_adjustment(...)`` of ``hooks``, or ``None`` when the hooks add nothing."""
    if hooks is None or hooks.adjust_mask is None or float(hooks.adjust_alpha) == 0.0:
        return None
    return float(hooks.adjust_alpha) * high_prob_adjustment(
        ratio,
        advantages,
        mask * hooks.adjust_mask.to(device=mask.device, dtype=mask.dtype),
        gradient_accumulation_steps=gradient_accumulation_steps,
        training=training,
    )


def additive_hooks_loss(
    per_token_logps: Tensor,
    inputs: Mapping[str, Tensor],
    hooks: TokenHooks | None,
    *,
    importance_sampling_level: str = "token",
    gradient_accumulation_steps: int = 1,
    training: bool = True,
) -> Tensor | None:
    """The additive part of ``hooks`` (EntroPIC's ``adjust_alpha * mean_{adjust_mask}(-r |A|)``): exactly the term
    :func:`compute_grpo_loss` adds to the aggregated loss, or ``None`` when the hooks add nothing.

    For a trainer that keeps TRL's own ``_compute_loss`` and adds the term: ``per_token_logps`` are the log-probs of
    TRL's loss forward, with their gradient (no second forward), ``inputs`` TRL's batch. Hooks that change the
    per-token surrogate (``token_weights``, ``detach_mask``, ``kl_cov_mask``) cannot be added afterwards: they raise
    ``ValueError`` (use :func:`trainer_compute_loss`).
    """
    if hooks is None:
        return None
    per_token = [name for name in ("token_weights", "detach_mask", "kl_cov_mask") if getattr(hooks, name) is not None]
    if per_token:
        raise ValueError(
            f"TokenHooks.{per_token[0]} changes the per-token surrogate and cannot be added to TRL's loss; only "
            "adjust_mask/adjust_alpha can (use trainer_compute_loss for the others)."
        )
    hooks.validate(tuple(per_token_logps.shape))
    mask = loss_mask(inputs)
    old = inputs.get("old_per_token_logps")
    old = per_token_logps.detach() if old is None else old
    ratio = torch.exp(log_importance_weights(per_token_logps - old, mask, importance_sampling_level))
    return _adjustment_term(
        hooks, ratio, _as_2d_advantages(inputs["advantages"]), mask,
        gradient_accumulation_steps=gradient_accumulation_steps, training=training,
    )


# --------------------------------------------------------------------------------------------------------------------
# trainer adapter
# --------------------------------------------------------------------------------------------------------------------

HooksFn = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], "TokenHooks | None"]


def check_trainer_supported(trainer, inputs: Mapping | None = None) -> None:
    """Raise ``NotImplementedError`` naming the setting if the trainer uses a feature this loss path lacks."""
    problems = []
    if trainer.loss_type in UNSUPPORTED_TRL_LOSS_TYPES:
        problems.append(f"loss_type={trainer.loss_type!r} (supported: {', '.join(SUPPORTED_LOSS_TYPES)})")
    if getattr(trainer, "use_adaptive_entropy", False):
        problems.append("use_adaptive_entropy=True (the adaptive entropy coefficient; a static entropy_coef works)")
    if getattr(trainer, "aux_loss_enabled", False):
        problems.append("the MoE router auxiliary loss (router_aux_loss_coef != 0 on a MoE model)")
    if inputs is not None:
        present = [key for key in MULTIMODAL_KEYS if inputs.get(key) is not None]
        if present:
            problems.append(f"multimodal inputs ({', '.join(present)})")
    if problems:
        raise NotImplementedError(
            "trl_entropy's token-level policy loss does not support: " + "; ".join(problems) + ". Turn the feature "
            "off, or use a control that does not change the per-token loss."
        )
    _check_loss_type(trainer.loss_type)  # ValueError for names TRL does not know either


def _global_masked_mean(accelerator, x: Tensor, mask: Tensor) -> float:
    """Token mean of ``x`` over ``mask`` across processes; one value per sequence when ``x`` is (B, 1)."""
    if x.shape[1] == 1:
        total, count = x.sum(), torch.tensor(float(x.shape[0]), device=x.device)
    else:
        total, count = (x * mask).sum(), mask.sum().float()
    sums = accelerator.reduce(torch.stack([total, count]), reduction="sum")
    return (sums[0] / sums[1].clamp(min=1.0)).item()


def _per_sequence_mean(x: Tensor, mask: Tensor) -> Tensor:
    """(B,) mean of ``x`` over each sequence's loss tokens (``x`` already per sequence when (B, 1))."""
    if x.shape[1] == 1:
        return x.squeeze(1)
    return (x * mask).sum(-1) / mask.sum(-1)


def _log_trl_metrics(trainer, out: dict, entropies: Tensor, config: GRPOLossConfig) -> None:
    """Append the metrics TRL's ``_compute_loss`` logs, under TRL's names, to TRL's metrics of ``mode``."""
    mode = "train" if config.training else "eval"

    def log(name: str, value) -> None:
        log_metric(trainer, name, value, mode)

    acc = trainer.accelerator
    mask, advantages, coef_1 = out["mask"], out["advantages"], out["coef_1"]

    if _bonus_applies(config):  # as TRL: whenever its bonus is enabled, also at a coefficient of 0
        log("policy_loss", acc.gather(out["policy_loss"]).nanmean().item())
        if mode == "train" and acc.sync_gradients:
            log("entropy_coef", trainer.entropy_coef)
    if out["per_token_kl"] is not None:
        log("kl", _global_masked_mean(acc, out["per_token_kl"], mask))
    log("entropy", _global_masked_mean(acc, entropies, mask))

    low = ((coef_1 < 1 - config.epsilon_low) & (advantages < 0)).float()
    high = ((coef_1 > 1 + config.epsilon_high) & (advantages > 0)).float()
    region = ((low + high) > 0).float()
    log("clip_ratio/low_mean", _global_masked_mean(acc, low, mask))
    log("clip_ratio/high_mean", _global_masked_mean(acc, high, mask))
    log("clip_ratio/region_mean", _global_masked_mean(acc, region, mask))
    log("clip_ratio/low_min", nanmin(acc.gather(_per_sequence_mean(low, mask))).item())
    log("clip_ratio/high_max", nanmax(acc.gather(_per_sequence_mean(high, mask))).item())


def trainer_compute_loss(trainer, model, inputs, hooks_fn: HooksFn | None = None, *, return_details: bool = False):
    """Drop-in for ``trl.GRPOTrainer._compute_loss(model, inputs)`` with token hooks.

    1. runs TRL's forward (``trainer._get_per_token_logps_and_entropies``, with entropies) on the batch;
    2. calls ``hooks_fn(per_token_logps, old_per_token_logps, advantages, mask, entropies)`` (all detached;
       ``advantages`` 2-D: (B, 1) or (B, T); ``mask`` TRL's loss mask) under ``torch.no_grad()``, which returns a
       :class:`TokenHooks` or ``None``;
    3. computes the loss with :func:`compute_grpo_loss` from the trainer's settings
       (:meth:`GRPOLossConfig.from_trainer`);
    4. logs TRL's metrics (``entropy``, ``kl``, ``clip_ratio/*``, and with an entropy bonus ``policy_loss`` and
       ``entropy_coef``) into TRL's metrics (``_trl_private.log_metric``) as TRL does.

    Without hooks, the loss, its gradient and the logged metrics equal TRL's (same inputs, same model).

    Not supported (``NotImplementedError``): loss types ``cispo``, ``sapo``, ``vespo``; ``use_adaptive_entropy``;
    the MoE router auxiliary loss; multimodal inputs. Supported: ``grpo``, ``bnpo``, ``dr_grpo``, ``dapo``,
    ``luspo``; token and sequence importance sampling; ``delta``; ``beta`` (reference KL); vLLM importance
    correction; ``top_entropy_quantile``; ``off_policy_mask_threshold``; static ``entropy_coef``; ``tool_mask``.

    Returns:
        the loss (scalar tensor), or ``(loss, details)`` with ``return_details=True`` where ``details`` is the dict of
        :func:`compute_grpo_loss` plus ``hooks``, ``per_token_logps`` and ``entropies``.
    """
    check_trainer_supported(trainer, inputs)
    completion_ids = inputs["completion_ids"]
    input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
    attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    per_token_logps, entropies, _ = per_token_logps_and_entropies(
        trainer, model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True
    )
    config = GRPOLossConfig.from_trainer(trainer)
    mask = loss_mask(inputs)

    entropy_mask = None
    if trainer.top_entropy_quantile < 1.0:
        entropy_mask = trainer.get_high_entropy_mask(entropies, mask, 1 - trainer.top_entropy_quantile)

    hooks = None
    if hooks_fn is not None:
        old = inputs.get("old_per_token_logps")
        old = per_token_logps.detach() if old is None else old
        with torch.no_grad():
            hooks = hooks_fn(
                per_token_logps.detach(), old, _as_2d_advantages(inputs["advantages"]), mask, entropies.detach()
            )

    out = compute_grpo_loss(
        per_token_logps, inputs, config, entropies=entropies, entropy_mask=entropy_mask, hooks=hooks
    )
    _log_trl_metrics(trainer, out, entropies, config)
    if return_details:
        return out["loss"], {**out, "hooks": hooks, "per_token_logps": per_token_logps, "entropies": entropies}
    return out["loss"]
