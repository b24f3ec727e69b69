"""A control written outside trl-entropy: the weight of negative-advantage rollouts under proportional feedback.

    python examples/custom_control.py                  # 40 optimizer steps on the tiny CPU testbed
    python examples/custom_control.py --max_steps 200  # long enough to watch the control hold entropy up

Rollouts with a negative advantage are weighted by w, the others by 1, and w moves every optimizer step with the
relative entropy error: below the target w grows (pushing probability away from wrong samples spreads it and
raises entropy, Zhu et al. 2025), above it w shrinks. Registering the class is all it takes:
`GRPOEntropyConfig(entropy_control="negative_feedback", ...)` accepts it, `GRPOEntropyTrainer` runs it, the knob is
logged as `entropy_control/negative_weight` and the model card describes it. Its settings (the gain and the range of
w) are its own: `entropy_control_settings={"negative_feedback_kp": 2.0}` in Python, `--negative_feedback_kp 2.0` with
`trl-entropy grpo --entropy_control_module custom_control`.
"""

import argparse
from dataclasses import dataclass, field

from trl_entropy import EntropyControl, GRPOEntropyConfig, GRPOEntropyTrainer, register_control
from trl_entropy.losses import sign_weights


@dataclass
class NegativeFeedbackSettings:
    """The control's settings: each field is a key of `entropy_control_settings` and a flag of `trl-entropy grpo`."""

    negative_feedback_kp: float = field(default=4.0, metadata={"help": "gain on the relative entropy error; >= 0"})
    negative_feedback_w_min: float = field(default=0.0, metadata={"help": "lowest weight w; >= 0"})
    negative_feedback_w_max: float = field(default=4.0, metadata={"help": "highest weight w; >= w_min"})

    def validate(self, args):  # called by GRPOEntropyConfig when this control is chosen
        if not 0 <= self.negative_feedback_w_min <= self.negative_feedback_w_max or self.negative_feedback_kp < 0:
            raise ValueError(f"negative_feedback settings: need kp >= 0 and 0 <= w_min <= w_max, got {self}.")


@register_control("negative_feedback")
class NegativeFeedbackControl(EntropyControl):
    """Negative-sample weight w = clip(1 + kp * (target - H) / target, w_min, w_max), positives weighted by 1."""

    follows_target = True  # the config requires a target (entropy_schedule_start); the tracking error is logged
    knob_name = "negative_weight"  # knob logged as entropy_control/negative_weight
    uses_advantage_weights = True  # the trainer calls advantage_weights() on every micro-batch
    card_text = ("negative-sample weight under proportional feedback (an example control, "
                 "examples/custom_control.py): rollouts with a negative advantage are weighted by "
                 "w = clip(1 + kp·(target − H)/target, w_min, w_max), the others by 1; a larger w raises entropy.")
    citations = ("zhu2025",)  # keys of trl_entropy.citations.BIBTEX, or of a `bibtex = {key: entry}` attribute
    settings_class = NegativeFeedbackSettings  # self.settings holds the values this run uses

    @classmethod
    def validate(cls, args):  # called by GRPOEntropyConfig when this control is chosen
        start = args.entropy_schedule_start
        if isinstance(start, float) and start <= 0:
            raise ValueError(f"entropy_control='negative_feedback' divides by the target: entropy_schedule_start "
                             f"must be > 0, got {start}.")

    def __init__(self, args):
        super().__init__(args)
        self.kp = self.settings.negative_feedback_kp
        self.w_min, self.w_max = self.settings.negative_feedback_w_min, self.settings.negative_feedback_w_max
        self.weight = 1.0
        self.error = 0.0

    def observe(self, measured, target):  # once per optimizer step, with the entropy reduced over all processes
        if target is not None and target > 0:
            self.error = (target - measured) / target
            self.weight = min(max(1.0 + self.kp * self.error, self.w_min), self.w_max)

    def advantage_weights(self, advantages, step, total_steps):  # multiplies each micro-batch's advantages
        return sign_weights(advantages, positive_weight=1.0, negative_weight=self.weight)

    @property
    def knob(self):
        return self.weight

    @property
    def limit_push(self):  # at a limit with the error asking for more: read by the saturation monitor
        if self.weight >= self.w_max and self.error > 0:
            return 1
        if self.weight <= self.w_min and self.error < 0:
            return -1
        return 0

    def state_dict(self):  # saved with every checkpoint; resuming restores it
        return {"weight": self.weight, "error": self.error}

    def load_state_dict(self, state):
        self.weight, self.error = float(state["weight"]), float(state["error"])


def train(model, tokenizer, train_dataset, reward_funcs, **config_kwargs):
    """Train `model` with the control, the target falling from the model's own entropy to half of it."""
    config = GRPOEntropyConfig(
        entropy_control="negative_feedback",
        entropy_schedule="linear",
        entropy_schedule_start="initial",  # the starting model's entropy, measured on the first generation batch
        entropy_schedule_end="0.5*initial",
        **config_kwargs,
    )
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=reward_funcs, args=config, train_dataset=train_dataset,
                                 processing_class=tokenizer)
    trainer.train()
    return trainer


def main(argv=None):
    from trl_entropy.demo import testbed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max_steps", type=int, default=40, help="optimizer steps (default: 40)")
    parser.add_argument("--output_dir", default="runs/custom_control", help="where the model, card and pictures go")
    args = parser.parse_args(argv)

    model, tokenizer = testbed.load_or_pretrain()
    train_dataset, _ = testbed.make_datasets()
    trainer = train(model, tokenizer, train_dataset, testbed.accuracy_reward, output_dir=args.output_dir,
                    max_steps=args.max_steps, **testbed.grpo_config_kwargs())
    trainer.save_model()  # weights, model card (README.md) and pictures

    last = [h for h in trainer.state.log_history if "entropy_control/negative_weight" in h][-1]
    print(f"step {last['step']}: measured entropy {last['entropy_control/measured']:.3f} nats, "
          f"target {last['entropy_control/target']:.3f}, negative_weight {last['entropy_control/negative_weight']:.2f}")
    print(f"model card: {args.output_dir}/README.md")


if __name__ == "__main__":
    main()
