"""Entrocraft, positive reweighting and W-REINFORCE through TRL's real loop on a tiny model."""

import math

import pytest
import torch
from trl import GRPOTrainer
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_model, tiny_tokenizer

from trl_entropy import GRPOEntropyTrainer


def make_trainer(args, reward=count_ones_reward):
    return GRPOEntropyTrainer(model=tiny_model(), reward_funcs=reward, args=args, train_dataset=tiny_dataset(),
                              processing_class=tiny_tokenizer())


def history(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


def run(args, reward=count_ones_reward):
    trainer = make_trainer(args, reward)
    trainer.train()
    return trainer


OFF_POLICY = dict(steps_per_generation=2)


def test_entrocraft_with_everything_in_band_equals_plain_grpo(tmp_path):
    plain = run(tiny_args(tmp_path / "a", max_steps=4, **OFF_POLICY))
    ec = run(tiny_args(tmp_path / "b", max_steps=4, entropy_control="entrocraft", entropy_schedule_start=2.639,
                       entrocraft_band=100.0, **OFF_POLICY))
    assert history(ec, "loss") == history(plain, "loss")
    assert history(ec, "entropy_control/acceptance_rate") == [1.0, 1.0]  # two generation batches
    assert history(ec, "entropy_control/sign") == [0.0] * 4  # one value per optimizer step


@pytest.mark.parametrize("source", ["scoring_pass", "extra_pass", "lagged"])
def test_entrocraft_hard_below_band_keeps_only_negatives(tmp_path, source):
    # a target at log(14) with no band: every entropy of the 14-token model is below it
    args = tiny_args(tmp_path, max_steps=4, entropy_control="entrocraft", entrocraft_mode="hard",
                     entropy_schedule_start=2.639, entrocraft_band=0.0, entrocraft_entropy_source=source,
                     **OFF_POLICY)
    trainer = run(args)
    assert history(trainer, "entropy_control/sign") == [-1.0] * 4
    pos = [v for v in history(trainer, "entropy_control/positive_kept_fraction") if not math.isnan(v)]
    neg = [v for v in history(trainer, "entropy_control/negative_kept_fraction") if not math.isnan(v)]
    assert pos and all(v == 0.0 for v in pos)
    assert neg and all(v == 1.0 for v in neg)
    rollout_h = history(trainer, "entropy_control/rollout_entropy")
    assert all(0 < h < 3 for h in rollout_h)


def test_entrocraft_scoring_pass_entropy_equals_extra_pass(tmp_path):
    """The entropy taken from TRL's old-log-prob pass is the entropy of an extra no-grad pass (no extra compute)."""
    common = dict(max_steps=2, entropy_control="entrocraft", entropy_schedule_start=1.0, **OFF_POLICY)
    a = run(tiny_args(tmp_path / "a", entrocraft_entropy_source="scoring_pass", **common))
    b = run(tiny_args(tmp_path / "b", entrocraft_entropy_source="extra_pass", **common))
    assert history(a, "entropy_control/rollout_entropy") == pytest.approx(history(b, "entropy_control/rollout_entropy"),
                                                                          rel=1e-5)


def zero_reward(completions, **kwargs):
    return [0.0 for _ in completions]


def test_all_rejected_gives_finite_loss_warning_and_counter(tmp_path):
    # all advantages are 0 (constant reward); hard mode above the band keeps only A > 0 -> everything rejected
    args = tiny_args(tmp_path, max_steps=4, entropy_control="entrocraft", entrocraft_mode="hard",
                     entropy_schedule_start=0.0, **OFF_POLICY)
    with pytest.warns(RuntimeWarning, match="every rollout"):
        trainer = run(args, reward=zero_reward)
    losses = history(trainer, "loss")
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses)
    assert history(trainer, "entropy_control/all_rejected")[-1] == 2.0
    assert history(trainer, "entropy_control/acceptance_rate") == [0.0, 0.0]


@pytest.mark.parametrize("loss_type", ["dapo", "bnpo", "grpo"])
def test_normalizer_kept_vs_all_exactly_as_documented(tmp_path, loss_type):
    """Half the rollouts rejected: 'kept' divides by the kept rollouts' tokens (or rows), 'all' by all of them."""
    args = tiny_args(tmp_path, max_steps=1, loss_type=loss_type, entropy_control="entrocraft",
                     entropy_schedule_start=1.0, entrocraft_entropy_source="extra_pass")
    trainer = make_trainer(args)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    batch = next(iter(trainer.get_train_dataloader()))
    output = GRPOTrainer._generate_and_score_completions(trainer, batch)  # TRL's, unfiltered
    adv, mask = output["advantages"].clone(), output["completion_mask"].float()
    keep = torch.zeros_like(adv, dtype=torch.bool)
    keep[::2] = True

    def loss_with(normalizer):
        trainer.args.entrocraft_normalizer = normalizer
        out = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in output.items()}
        out["ec_entropy_mask"] = out["completion_mask"]
        trainer._apply_keep(out, keep, out["completion_mask"])
        inputs = trainer._transform_micro_batch(out)
        with torch.no_grad():
            return trainer._compute_loss(trainer.model, inputs).item()

    # on-policy first step: ratio 1, so the per-token loss is exactly -A on every valid token
    k = keep.float()[:, None]
    if loss_type == "dapo":
        expected_kept = (-(adv[:, None]) * mask * k).sum() / (mask * k).sum()
        expected_all = (-(adv[:, None]) * mask * k).sum() / mask.sum()
    elif loss_type == "bnpo":
        expected_kept = (-(adv[:, None]) * mask * k).sum() / (mask * k).sum()
        expected_all = (-(adv[:, None]) * mask * k).sum() / mask.sum()
    else:  # grpo: mean over sequences of per-sequence means
        per_seq = (-(adv[:, None]) * mask).sum(1) / mask.sum(1).clamp(min=1)
        expected_kept = (per_seq * keep).sum() / keep.sum()
        expected_all = (per_seq * keep).sum() / len(keep)
    assert loss_with("kept") == pytest.approx(expected_kept.item(), abs=1e-6)
    assert loss_with("all") == pytest.approx(expected_all.item(), abs=1e-6)


def test_positive_reweight_lambda_moves_with_entropy(tmp_path):
    up = run(tiny_args(tmp_path / "a", max_steps=4, entropy_control="positive_reweight", entropy_schedule_start=0.0))
    down = run(tiny_args(tmp_path / "b", max_steps=4, entropy_control="positive_reweight", entropy_schedule_start=2.639,
                         positive_reweight_lambda_init=0.5))
    assert history(up, "entropy_control/lambda") == pytest.approx([0.0, 0.05, 0.1, 0.15])  # entropy above target
    assert history(down, "entropy_control/lambda") == pytest.approx([0.5, 0.45, 0.4, 0.35])  # below target


def test_positive_reweight_proportional_term_acts_in_the_same_step(tmp_path):
    # Target above every measured entropy (log 14 = 2.639 is the most a 14-token model can have; it measures ~2.55-2.62):
    # the paper's rule walks lambda down by one step per update, a large proportional term (kp * relative error,
    # 100 * -0.01 or less) sends it to 0 at the first update.
    kw = dict(max_steps=4, entropy_control="positive_reweight", entropy_schedule_start=2.639,
              positive_reweight_lambda_init=0.5, positive_reweight_step=0.05)
    pi = run(tiny_args(tmp_path / "a", positive_reweight_kp=100.0, **kw))
    assert history(pi, "entropy_control/lambda") == pytest.approx([0.5, 0.0, 0.0, 0.0])
    # Target 2.0: lambda = clip(I + kp * (H - 2) / 2, 0, 1) from the entropy measured on the step before.
    up = run(tiny_args(tmp_path / "b", max_steps=4, entropy_control="positive_reweight", entropy_schedule_start=2.0,
                       positive_reweight_step=0.05, positive_reweight_kp=0.5))
    measured, lam = history(up, "entropy_control/measured"), history(up, "entropy_control/lambda")
    integral = 0.0
    for k in range(1, 4):
        integral = min(1.0, max(0.0, integral + (0.05 if measured[k - 1] >= 2.0 else -0.05)))
        assert lam[k] == pytest.approx(min(1.0, max(0.0, integral + 0.5 * (measured[k - 1] - 2.0) / 2.0)), abs=1e-6)
    assert any(0.0 < x < 1.0 for x in lam[1:])  # the formula was exercised away from the clamps


def test_positive_reweight_stage_progression_needs_no_target(tmp_path):
    trainer = run(tiny_args(tmp_path, max_steps=4, entropy_control="positive_reweight",
                            positive_reweight_schedule="stage"))
    # steps 0..3 -> progress 0, 1/3, 2/3, 1: lambda 0 in the first half, then 2p - 1, reaching 1 on the last step
    assert history(trainer, "entropy_control/lambda") == pytest.approx([0.0, 0.0, 1 / 3, 1.0])


@pytest.mark.parametrize("control, kw", [("w_reinforce", dict(w_reinforce_lambda=1.0)),
                                         ("positive_reweight", dict(positive_reweight_lambda_init=1.0,
                                                                    positive_reweight_step=1.0,
                                                                    entropy_schedule_start=0.0))])
def test_weight_one_equals_plain_grpo(tmp_path, control, kw):
    plain = run(tiny_args(tmp_path / "a", max_steps=4, **OFF_POLICY))
    ours = run(tiny_args(tmp_path / "b", max_steps=4, entropy_control=control, **kw, **OFF_POLICY))
    assert history(ours, "loss") == history(plain, "loss")
    for p1, p2 in zip(ours.model.parameters(), plain.model.parameters()):
        assert torch.equal(p1, p2)


def test_w_reinforce_zero_weight_trains_only_on_negatives(tmp_path):
    """lambda = 0: the positive-advantage rollouts contribute nothing, so the first loss is the negatives' share."""
    trainer = make_trainer(tiny_args(tmp_path, max_steps=1, entropy_control="w_reinforce", w_reinforce_lambda=0.0))
    trainer.model.train()
    batch = next(iter(trainer.get_train_dataloader()))
    inputs = trainer._prepare_inputs(batch)
    assert (inputs["advantages"] <= 0).all()
    assert trainer._buffered_inputs[0]["advantages"].gt(0).any()  # the buffer itself is not modified


def test_entrocraft_control_decides_by_global_rollout_index():
    """Two simulated ranks holding halves of a batch decide exactly as one process holding all of it."""
    from types import SimpleNamespace

    from trl_entropy.controls import EntrocraftControl, RolloutContext

    args = SimpleNamespace(entrocraft_band=0.1, entrocraft_mode="stochastic", entrocraft_gamma=1.0)
    adv = torch.randn(16, generator=torch.Generator().manual_seed(0))

    def ctx(offset):
        return RolloutContext(entropy=0.1, target=0.5, step=0, total_steps=10, global_offset=offset,
                              global_size=16, seed=3)

    single = EntrocraftControl(args).transform_rollouts(adv, ctx(0)).keep
    rank0 = EntrocraftControl(args).transform_rollouts(adv[:8], ctx(0)).keep
    rank1 = EntrocraftControl(args).transform_rollouts(adv[8:], ctx(8)).keep
    assert torch.equal(torch.cat([rank0, rank1]), single)
    assert 0 < int(single.sum()) < 16  # a real mix of kept and rejected rollouts
