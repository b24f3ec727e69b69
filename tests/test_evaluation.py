"""pass@k callback, entropy -> performance fit callback and training pictures, through TRL's real loop."""

import math
import os

import pytest
import torch
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_kwargs, tiny_model, tiny_tokenizer
from transformers.trainer_callback import TrainerState
from trl import GRPOConfig, GRPOTrainer

from trl_entropy import EntropyPerformanceFitCallback, EntropyPlotCallback, GRPOEntropyTrainer, PassAtKCallback

PROBLEMS = [{"prompt": f"{i}+{i}="} for i in range(6)]
PNG = b"\x89PNG\r\n\x1a\n"


def make(args, cls=GRPOEntropyTrainer):
    return cls(model=tiny_model(), reward_funcs=count_ones_reward, args=args, train_dataset=tiny_dataset(),
               processing_class=tiny_tokenizer())


def evals(trainer):
    return [h for h in trainer.state.log_history if "eval/pass@1" in h]


@pytest.mark.parametrize("cls", [GRPOEntropyTrainer, GRPOTrainer])
def test_pass_at_k_is_logged_during_training(tmp_path, cls):
    args = tiny_args(tmp_path, max_steps=4) if cls is GRPOEntropyTrainer else GRPOConfig(**tiny_kwargs(tmp_path, max_steps=4))
    trainer = make(args, cls)
    cb = PassAtKCallback(trainer, PROBLEMS, n=8, ks=(1, 2, 8), threshold=1.0, every_n_steps=2)
    trainer.add_callback(cb)
    trainer.train()
    logged = evals(trainer)
    assert [h["step"] for h in logged] == [2, 4]  # every 2 steps; the end-of-training evaluation is not repeated
    for h in logged:
        p1, p2, p8 = h["eval/pass@1"], h["eval/pass@2"], h["eval/pass@8"]
        assert 0.0 <= p1 <= p2 <= p8 <= 1.0
        assert h["eval/mean@8"] == pytest.approx(p1)  # pass@1 is the mean success rate
    assert cb.last == {k: v for k, v in logged[-1].items() if k.startswith("eval/")}


def test_counts_match_the_reward_on_hand_made_completions(tmp_path):
    """pass@k aggregates the per-problem correct counts exactly (hand-computed for n=4)."""
    trainer = make(tiny_args(tmp_path, max_steps=1))
    cb = PassAtKCallback(trainer, PROBLEMS[:2], n=4, ks=(1, 2, 4))
    cb._correct_counts = lambda problems: [1, 4]  # problem 0: 1 of 4 correct, problem 1: 4 of 4
    out = cb.evaluate()
    assert out["eval/mean@4"] == pytest.approx((0.25 + 1.0) / 2)
    assert out["eval/pass@2"] == pytest.approx((0.5 + 1.0) / 2)  # 1 - C(3,2)/C(4,2) = 0.5
    assert out["eval/pass@4"] == pytest.approx(1.0)


def test_evaluation_does_not_change_the_training_run(tmp_path):
    def run(with_eval):
        trainer = make(tiny_args(tmp_path / str(with_eval), max_steps=4, steps_per_generation=2))
        if with_eval:
            trainer.add_callback(PassAtKCallback(trainer, PROBLEMS, n=4, ks=(1, 4), every_n_steps=1))
        trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        return losses, [p.detach().clone() for p in trainer.model.parameters()]

    (l0, w0), (l1, w1) = run(False), run(True)
    assert l0 == l1
    assert all(torch.equal(a, b) for a, b in zip(w0, w1))


def test_invalid_pass_at_k_arguments(tmp_path):
    trainer = make(tiny_args(tmp_path, max_steps=1))
    with pytest.raises(ValueError, match="ks"):
        PassAtKCallback(trainer, PROBLEMS, n=4, ks=(8,))
    with pytest.raises(ValueError, match="prompt"):
        PassAtKCallback(trainer, [{"question": "1+1="}])
    with pytest.raises(ValueError, match="temperature"):
        PassAtKCallback(trainer, PROBLEMS, temperature=0.0)


def test_fit_callback_recovers_a_known_curve_and_logs_the_ceiling():
    a, b = 0.5, 0.9
    cb = EntropyPerformanceFitCallback(score_key="eval/mean@16")
    state = TrainerState()
    for step, h in enumerate([1.2, 1.0, 0.8, 0.5, 0.3]):
        state.log_history.append({"step": step, "entropy": h})
        cb.on_log(None, state, None, logs={"eval/mean@16": -a * math.exp(h) + b})
        if step < 2:
            assert cb.fit is None  # too few points
    assert cb.fit.a == pytest.approx(a, rel=1e-6) and cb.fit.b == pytest.approx(b, rel=1e-6)
    assert cb.fit.ceiling == pytest.approx(b - a, rel=1e-6)


def test_fit_callback_logs_through_the_trainer(tmp_path):
    trainer = make(tiny_args(tmp_path, max_steps=3))
    pk = PassAtKCallback(trainer, PROBLEMS, n=4, ks=(1, 4), every_n_steps=1, at_train_end=False)
    fit = EntropyPerformanceFitCallback(trainer, score_key="eval/mean@4")
    trainer.add_callback(pk)
    trainer.add_callback(fit)
    trainer.train()
    assert len(fit.points) == 3
    if fit.fit is not None:  # entropies of three steps differ in practice; then the ceiling is logged
        assert any("entropy_control/predicted_ceiling" in h for h in trainer.state.log_history)


def test_plots_are_written_at_each_save_and_at_the_end(tmp_path):
    trainer = make(tiny_args(tmp_path, max_steps=4, save_strategy="steps", save_steps=2, steps_per_generation=2,
                             entropy_control="adaptive_clip", entropy_schedule_start=2.0))
    trainer.add_callback(PassAtKCallback(trainer, PROBLEMS, n=4, ks=(1, 2, 4), every_n_steps=2))
    saves = []
    real_write = trainer.entropy_plot_callback._write

    def spy(args, state):
        real_write(args, state)
        saves.append(state.global_step)

    trainer.entropy_plot_callback._write = spy
    trainer.train()
    assert saves == [2, 4, 4]  # two saves, then the end of training
    for name in ("entropy_curves.png", "entropy_knob.png", "reward.png", "pass_at_k.png"):
        path = tmp_path / name
        assert path.exists(), name
        assert path.read_bytes()[:8] == PNG
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp.png")]


def test_two_writers_of_one_picture_never_take_each_other_s_temporary_file(tmp_path, monkeypatch):
    """Two runs given one output_dir write the same picture names: each goes through a temporary file of its own (a
    shared name once let one run rename the other's file away and crash at the end of training)."""
    from trl_entropy._plotting import new_figure, save_figure

    replaced, real_replace = [], os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (replaced.append(src), real_replace(src, dst)))
    path = str(tmp_path / "entropy_knob.png")
    for _ in range(2):
        fig, _ax = new_figure()
        save_figure(fig, path)
    assert len(set(replaced)) == 2 and all(os.path.dirname(src) == str(tmp_path) for src in replaced)
    assert os.listdir(tmp_path) == ["entropy_knob.png"] and (tmp_path / "entropy_knob.png").read_bytes()[:8] == PNG

    fig, _ax = new_figure()
    monkeypatch.setattr(fig, "savefig", lambda tmp, dpi: (open(tmp, "wb").close(), 1 / 0))
    with pytest.raises(ZeroDivisionError):
        save_figure(fig, path)
    assert os.listdir(tmp_path) == ["entropy_knob.png"]  # no temporary file left behind


def test_a_picture_that_cannot_be_written_warns_and_the_run_ends_normally(tmp_path):
    (tmp_path / "pictures").write_text("a file where the pictures' folder should be")
    trainer = make(tiny_args(tmp_path, max_steps=2, entropy_control="adaptive_clip", entropy_schedule_start=2.0))
    trainer.entropy_plot_callback.output_dir = str(tmp_path / "pictures")
    with pytest.warns(UserWarning, match="EntropyPlotCallback could not write the training pictures"):
        trainer.train()
    assert trainer.state.global_step == 2


def test_plots_can_be_turned_off(tmp_path):
    trainer = make(tiny_args(tmp_path, max_steps=1, entropy_plots=False))
    assert trainer.entropy_plot_callback is None
    assert not any(isinstance(c, EntropyPlotCallback) for c in trainer.callback_handler.callbacks)


def visible_xticks(ax):
    lo, hi = sorted(ax.get_xlim())
    return [t for t in ax.get_xticks() if lo <= t <= hi]


ONE_STEP = [
    {"step": 1, "loss": 0.1, "reward": 0.5, "entropy_control/measured": 1.0, "entropy_control/target": 1.1,
     "entropy_control/epsilon_high": 0.28},
    {"step": 1, "eval/pass@1": 0.2, "eval/pass@2": 0.3, "eval/pass@4": 0.5},
]


def test_a_single_logged_step_is_drawn_as_points_on_whole_step_ticks():
    from trl_entropy.evaluation import training_figures

    figures = training_figures(ONE_STEP)
    assert set(figures) == {"entropy_curves.png", "entropy_knob.png", "reward.png", "pass_at_k.png"}
    for name, fig in figures.items():
        for ax in fig.axes:
            lines = ax.get_lines()
            assert lines, name
            # one point is a zero-length line: without a marker the picture is blank
            assert all(line.get_marker() not in (None, "None", "", " ") for line in lines), name
            ticks = visible_xticks(ax)
            assert ticks and all(float(t).is_integer() for t in ticks), (name, ticks)
    assert [float(t) for t in visible_xticks(figures["reward.png"].axes[0])] == [1.0]
    assert [float(t) for t in visible_xticks(figures["pass_at_k.png"].axes[0])] == [1.0, 2.0, 4.0]


def test_long_series_are_plain_lines_with_whole_step_ticks():
    from trl_entropy._plotting import MARKER_MAX_POINTS
    from trl_entropy.evaluation import training_figures

    n = MARKER_MAX_POINTS + 1
    history = [{"step": s, "reward": s / n, "entropy": 1.0 - s / (2 * n)} for s in range(1, n + 1)]
    figures = training_figures(history)
    assert set(figures) == {"entropy_curves.png", "reward.png"}
    for fig in figures.values():
        ax = fig.axes[0]
        assert [line.get_marker() for line in ax.get_lines()] == ["None"]
        assert all(float(t).is_integer() for t in visible_xticks(ax))
    short = training_figures([{"step": s, "reward": 0.1} for s in (1, 2, 3)])["reward.png"].axes[0]
    assert all(float(t).is_integer() for t in visible_xticks(short))  # matplotlib's default here: 1.0, 1.25, ...


def test_the_entropy_coefficient_is_drawn_once():
    """TRL logs `entropy_coef` and a control that moves it logs `entropy_control/entropy_coef`: one panel, the
    control's (signed, also where TRL applies 0); TRL's own series only where no control logs the coefficient."""
    from trl_entropy.evaluation import training_figures

    def panels(history):
        return [ax.get_ylabel() for ax in training_figures(history)["entropy_knob.png"].axes]

    both = [{"step": s, "entropy_coef": 0.0, "entropy_control/entropy_coef": -0.05 * s} for s in (1, 2, 3)]
    assert panels(both) == ["entropy_coef"]
    ax = training_figures(both)["entropy_knob.png"].axes[0]
    assert list(ax.get_lines()[0].get_ydata()) == [-0.05, -0.1, -0.15000000000000002]  # the control's series
    assisted = [dict(row, **{"entropy_control/epsilon_high": 0.28}) for row in both]
    assert panels(assisted) == ["epsilon_high", "entropy_coef"]
    plain = [{"step": s, "entropy_coef": 0.01 * s} for s in (1, 2, 3)]  # plain GRPO or TRL's rule on its own
    assert panels(plain) == ["entropy_coef"]


def test_the_starting_model_is_scored_at_step_0_and_drawn_next_to_the_trained_one(tmp_path):
    """at_train_begin (issue 50): the starting model's pass@k at step 0, the learning curves and the card's row."""
    from trl_entropy.evaluation import training_figures

    trainer = make(tiny_args(tmp_path, max_steps=4, save_strategy="no"))
    cb = PassAtKCallback(trainer, PROBLEMS, n=4, ks=(1, 4), every_n_steps=2, at_train_begin=True)
    trainer.add_callback(cb)
    trainer.train()
    assert [h["step"] for h in evals(trainer)] == [0, 2, 4]
    figures = training_figures(trainer.state.log_history)
    labels = [line.get_label() for line in figures["pass_at_k.png"].axes[0].get_lines()]
    assert labels[0] == "starting model" and labels[-1] == "step 4"
    curves = figures["heldout_curves.png"].axes[0].get_lines()
    assert [line.get_label() for line in curves] == ["pass@1", "pass@4"]
    assert list(curves[0].get_xdata()) == [0, 2, 4]
    trainer.create_model_card(model_name="m")
    card = open(os.path.join(tmp_path, "README.md")).read()
    assert "| starting model |" in card
    assert "![pass@k on held-out problems](pass_at_k.png)" in card
    assert "![Held-out pass@k during training](heldout_curves.png)" in card
    # without it nothing is evaluated before training (the default stays as it was)
    plain = make(tiny_args(tmp_path / "plain", max_steps=2, save_strategy="no"))
    plain.add_callback(PassAtKCallback(plain, PROBLEMS, n=4, ks=(1, 4)))
    plain.train()
    assert [h["step"] for h in evals(plain)] == [2]
