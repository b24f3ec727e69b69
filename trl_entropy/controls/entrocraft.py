"""Entrocraft rollout rejection (Li et al. 2026): `entropy_control="entrocraft"`."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch

from ..losses import band_from_target, entrocraft_acceptance, entrocraft_sign
from ._base import _USER_STACKLEVEL, _mix_seed, check_choice, check_range, EntropyControl, RolloutDecision, register_control


ENTROCRAFT_MODES = ("stochastic", "hard")
ENTROCRAFT_NORMALIZERS = ("kept", "all")
ENTROCRAFT_ENTROPY_SOURCES = ("auto", "scoring_pass", "extra_pass", "lagged")


@dataclass
class EntrocraftSettings:
    r"""
    Settings of Entrocraft (`entropy_control="entrocraft"`, Li et al. 2026).

    Parameters:
        entrocraft_mode (`str`, *optional*, defaults to `"stochastic"`):
            `"stochastic"`: the paper's rule, keep rollout i iff u <= exp(gamma * m * A_i), u ~ U[0, 1), with
            m = 1[H > h_high] - 1[H < h_low]. `"hard"`: the authors' released code (gamma -> infinity): above the band
            keep only positive-advantage rollouts, below it only negative ones, inside it keep all.
        entrocraft_gamma (`float`, *optional*, defaults to `10.0`):
            Temperature gamma of the stochastic acceptance; >= 0.
        entrocraft_band (`float`, *optional*, defaults to `0.1`):
            Width of the entropy band around the scheduled target: h_low/h_high = target -/+ band/2 (0.1 in every
            released script).
        entrocraft_normalizer (`str`, *optional*, defaults to `"kept"`):
            `"kept"`: rejected rollouts leave the loss normaliser (the paper's 1/|S_x|). `"all"`: as the released
            code, rejected rollouts only get a zero advantage and still count in the normaliser. With `"kept"` they
            also leave TRL's own `entropy` metric, which then covers kept rollouts only, while
            `entropy_control/measured` (the entropy the control acts on, and the one the model card and pictures
            report) covers every rollout; the two curves differ whenever rollouts are rejected.
        entrocraft_entropy_source (`str`, *optional*, defaults to `"auto"`):
            Where the pre-update entropy H of the rollout batch comes from. `"scoring_pass"`: the old-log-prob
            forward TRL already runs when updates are off-policy (no extra pass; an error when TRL runs none).
            `"extra_pass"`: an extra no-grad forward on the rollouts. `"lagged"`: the entropy measured during the
            previous optimizer step (no extra compute, one step of lag; the first generation uses an extra pass).
            `"auto"`: `"scoring_pass"` when TRL runs one, else `"lagged"`.
    """

    entrocraft_mode: str = field(
        default="stochastic",
        metadata={"help": "Entrocraft: 'stochastic' (paper, keep iff u <= exp(gamma*m*A)) or 'hard' (released code)."},
    )
    entrocraft_gamma: float = field(
        default=10.0, metadata={"help": "Entrocraft: temperature gamma of the stochastic acceptance; >= 0."}
    )
    entrocraft_band: float = field(
        default=0.1, metadata={"help": "Entrocraft: band width around the target, h = target -/+ band/2; >= 0."}
    )
    entrocraft_normalizer: str = field(
        default="kept",
        metadata={"help": "Entrocraft: 'kept' (rejected rollouts leave the loss normaliser, paper) or 'all' "
                  "(released code: zero advantage, still in the normaliser)."},
    )
    entrocraft_entropy_source: str = field(
        default="auto",
        metadata={"help": "Entrocraft: source of the pre-update rollout entropy: 'auto', 'scoring_pass', "
                  "'extra_pass' or 'lagged'."},
    )


@register_control("entrocraft")
class EntrocraftControl(EntropyControl):
    """Entrocraft (Li et al. 2026): reject rollouts by advantage sign when entropy leaves a band around the target.

    Draws come from a generator seeded from (seed, generation counter), identical on every process; each process
    skips to its rollouts' global offset, so every rank decides as a single-process run over the same global batch.
    """

    follows_target = True
    uses_rollouts = True
    knob_name = "sign"
    card_text = ("Entrocraft rollout rejection (Li et al. 2026): when entropy leaves the band around the target, "
                 "rollouts are rejected by the sign of their advantage.")
    config_prefixes = ("entrocraft_",)
    citations = ("li2026",)
    settings_class = EntrocraftSettings
    demo_description = "Entrocraft rollout rejection, stochastic (Li et al.)"
    docs_page = "entrocraft.md"
    docs_row = ('Entrocraft, rollout rejection by advantage sign ([Li et al. 2026, arXiv 2604.26326](https://arxiv.org/abs/2604.26326))',
                'keep-mask from a band around the target',
                'every update',
                'yes')

    @classmethod
    def validate_settings(cls, args):
        check_choice(args, "entrocraft_mode", ENTROCRAFT_MODES)
        check_choice(args, "entrocraft_normalizer", ENTROCRAFT_NORMALIZERS)
        check_choice(args, "entrocraft_entropy_source", ENTROCRAFT_ENTROPY_SOURCES)
        check_range(args, "entrocraft_gamma", 0.0, math.inf)
        check_range(args, "entrocraft_band", 0.0, math.inf)

    @classmethod
    def validate(cls, args):
        if args.entrocraft_entropy_source == "scoring_pass" and not args.is_off_policy and not args.use_vllm:
            raise ValueError(
                "entrocraft_entropy_source='scoring_pass' needs the old-log-prob pass TRL runs only for off-policy "
                "updates or vLLM; use 'auto', 'extra_pass' or 'lagged', or train off-policy."
            )
        if args.entrocraft_normalizer == "kept" and args.loss_type == "dr_grpo":
            warnings.warn(
                "loss_type='dr_grpo' divides by a constant (batch size x max_completion_length); with "
                "entrocraft_normalizer='kept' rejected rollouts contribute nothing, but the constant normaliser does "
                "not shrink with them.",
                UserWarning,
                stacklevel=_USER_STACKLEVEL,
            )

    def __init__(self, args):
        super().__init__(args)
        self.generations = 0
        self.last_sign = 0

    def transform_rollouts(self, advantages, ctx):
        if ctx.entropy is None or ctx.target is None:
            return RolloutDecision()
        h_low, h_high = band_from_target(ctx.target, self.args.entrocraft_band)
        generator = torch.Generator(device="cpu").manual_seed(_mix_seed(ctx.seed, self.generations))
        self.generations += 1
        # Decide over the global batch (zeros outside this process's slice) and keep our slice: rollout i always
        # gets draw i, so every process decides exactly as a single-process run over the same global batch.
        local = advantages.detach().float().cpu().reshape(-1)
        global_adv = torch.zeros(ctx.global_size, dtype=local.dtype)
        global_adv[ctx.global_offset : ctx.global_offset + local.numel()] = local
        keep_global = entrocraft_acceptance(
            global_adv,
            ctx.entropy,
            h_low,
            h_high,
            self.args.entrocraft_gamma,
            mode=self.args.entrocraft_mode,
            generator=generator,
        )
        keep = keep_global[ctx.global_offset : ctx.global_offset + local.numel()]
        keep = keep.reshape(advantages.shape).to(advantages.device)
        m = entrocraft_sign(ctx.entropy, h_low, h_high)
        self.last_sign = m
        pos, neg = advantages > 0, advantages < 0
        counts = {
            "total": float(advantages.numel()),
            "kept": float(keep.sum()),
            "pos_total": float(pos.sum()),
            "pos_kept": float((keep & pos).sum()),
            "neg_total": float(neg.sum()),
            "neg_kept": float((keep & neg).sum()),
        }
        scalars = {"h_low": h_low, "h_high": h_high, "rollout_entropy": ctx.entropy}
        return RolloutDecision(keep=keep, counts=counts, scalars=scalars)

    def rollout_metrics(self, counts):
        def ratio(a, b):
            return counts[a] / counts[b] if counts[b] > 0 else float("nan")

        out = {
            "acceptance_rate": ratio("kept", "total"),
            "positive_kept_fraction": ratio("pos_kept", "pos_total"),
            "negative_kept_fraction": ratio("neg_kept", "neg_total"),
        }
        return out

    @property
    def knob(self):
        return float(self.last_sign)

    @property
    def limit_push(self) -> int:
        # Entrocraft's knob has one setting per side: outside the band it is at its extreme (all rollouts of one
        # advantage sign rejected in hard mode, nearly all with gamma = 10). m = +1 above the band: entropy must fall.
        return -int(self.last_sign)

    def state_dict(self):
        return {"generations": self.generations, "last_sign": self.last_sign}

    def load_state_dict(self, state):
        self.generations = int(state["generations"])
        self.last_sign = int(state.get("last_sign", 0))
