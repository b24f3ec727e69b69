"""What a new user gets wrong (issue 12): each bad input gets an error or warning that names the field or function."""

import copy
import json

import pytest
import torch
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_model, tiny_tokenizer

from trl_entropy import GRPOEntropyTrainer
from trl_entropy.trainers.grpo_entropy_trainer import CONTROL_STATE_FILE


def make(args, reward=count_ones_reward, dataset=None, model_seed=0, **kwargs):
    return GRPOEntropyTrainer(model=tiny_model(model_seed), reward_funcs=reward, args=args,
                              train_dataset=tiny_dataset() if dataset is None else dataset,
                              processing_class=tiny_tokenizer(), **kwargs)


def history(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


# ---------------------------------------------------------------------------------------------- callable schedules
def lambda_args(path, schedule, **kw):
    return tiny_args(path, entropy_control="adaptive_clip", entropy_schedule=schedule, steps_per_generation=2,
                     max_steps=4, save_strategy="steps", save_steps=2, **kw)


def test_a_lambda_schedule_survives_checkpoints_resume_and_save_model(tmp_path):
    schedule = lambda step, total: 2.0 - step / total  # noqa: E731 - a lambda is the point of this test
    straight = make(lambda_args(tmp_path, schedule))
    straight.train()  # used to fail with PicklingError in torch.save(args) at the first checkpoint

    ckpt = tmp_path / "checkpoint-2"
    for name in ("optimizer.pt", "scheduler.pt", "trainer_state.json", "training_args.bin", CONTROL_STATE_FILE):
        assert (ckpt / name).exists(), name  # a complete checkpoint, not a partial one
    saved = torch.load(ckpt / "training_args.bin", weights_only=False)
    assert saved.entropy_schedule.startswith("callable:lambda (test_bad_inputs.py:")
    assert straight.args.entropy_schedule is schedule  # the live config still holds the callable
    assert json.loads(straight.args.to_json_string())["entropy_schedule"] == saved.entropy_schedule

    # resume: the user passes the same callable again; the run continues exactly
    resumed = make(lambda_args(tmp_path, schedule), model_seed=1)
    resumed.train(resume_from_checkpoint=str(ckpt))
    for key in ("target", "measured", "epsilon_high"):
        assert history(resumed, f"entropy_control/{key}") == pytest.approx(
            history(straight, f"entropy_control/{key}"), rel=1e-6), key
    assert history(resumed, "entropy_control/target") == pytest.approx([2.0, 1.75, 1.5, 1.25])

    out = tmp_path / "final"
    resumed.save_model(str(out))  # used to fail the same way
    assert (out / "training_args.bin").exists()
    card = (out / "README.md").read_text()
    assert "`lambda (test_bad_inputs.py:" in card and "<function" not in card and "0x" not in card


def test_a_config_with_a_callable_schedule_copies_and_reloads_clearly(tmp_path):
    def local_schedule(step, total):
        return 1.0

    args = lambda_args(tmp_path, local_schedule)
    assert copy.deepcopy(args).entropy_schedule is local_schedule  # deepcopy keeps the callable
    assert copy.copy(args).entropy_schedule is local_schedule
    d = args.to_dict()
    assert d["entropy_schedule"] == "callable:test_a_config_with_a_callable_schedule_copies_and_reloads_clearly." \
                                    "local_schedule"
    # a config rebuilt from the stored placeholder says what to do instead of "must be one of ..."
    with pytest.raises(ValueError, match="pass the same callable again as entropy_schedule"):
        lambda_args(tmp_path, d["entropy_schedule"])


# ---------------------------------------------------------------------------------------------- reward functions
def _float(completions, **kw):
    return 0.5


def _dict(completions, **kw):
    return {"score": [1.0] * len(completions)}


def _words(completions, **kw):
    return ["correct" if "1" in c else "wrong" for c in completions]


def _numeric_strings(completions, **kw):
    return ["1.0" for _ in completions]


def _too_short(completions, **kw):
    return [1.0] * (len(completions) - 1)


def _nothing(completions, **kw):
    return None


def _generator(completions, **kw):
    return (1.0 for _ in completions)


@pytest.mark.parametrize(
    "reward, error, what",
    [
        (_float, TypeError, r"returned a float \(0\.5\)"),
        (_dict, TypeError, r"returned a dict \(keys 'score'\)"),
        (_words, TypeError, r"returned a str \('(correct|wrong)'\) for completion 0 .*Map each completion to a number"),
        (_numeric_strings, TypeError, r"returned a str \('1\.0'\) for completion 0 .*Convert numeric strings"),
        (_nothing, TypeError, r"returned None"),
        (_generator, TypeError, r"returned a generator"),
    ],
)
def test_a_reward_function_with_a_bad_output_is_named_with_what_it_returned(tmp_path, reward, error, what):
    trainer = make(tiny_args(tmp_path, max_steps=1), reward=reward)
    with pytest.raises(error, match=rf"Reward function '{reward.__name__}' {what}") as err:
        trainer.train()
    assert "expected a list of floats (or None for a completion it cannot score), one per completion" in str(err.value)


def _wants_answer(completions, answer, **kwargs):
    return [float(c.strip() == a) for c, a in zip(completions, answer)]


def _raises_type_error(completions, **kwargs):
    raise TypeError("a bug inside the function")


def test_a_reward_argument_that_no_column_provides_names_the_dataset_s_columns(tmp_path):
    """Issue 62: it failed with "missing 1 required positional argument: 'answer'. To find the failing completion,
    set reward_error_search=True", a hint that does not help."""
    from datasets import Dataset

    dataset = Dataset.from_dict({"prompt": [f"{i}+1=" for i in range(16)], "solution": [str(i + 1) for i in range(16)]})
    trainer = make(tiny_args(tmp_path, max_steps=1), reward=_wants_answer, dataset=dataset)
    with pytest.raises(TypeError, match=r"Reward function '_wants_answer' takes the argument 'answer', which no column "
                                        r"of the dataset provides.*this dataset's columns are "
                                        r"\['prompt', 'solution'\]\. Rename the argument") as err:
        trainer.train()
    assert "reward_error_search" not in str(err.value)


def test_a_type_error_of_the_reward_s_own_keeps_the_usual_message():
    from trl_entropy.trainers.faults import _guard_reward_function

    guarded = _guard_reward_function(_raises_type_error, "_raises_type_error")
    with pytest.raises(RuntimeError, match=r"'_raises_type_error' raised TypeError .*a bug inside the function"):
        guarded(prompts=["1+1="], completions=["2"], completion_ids=[[1]], solution=["2"])
    guarded = _guard_reward_function(_wants_answer, "_wants_answer")  # the column is there: it scores
    assert guarded(prompts=["1+1="], completions=["2"], completion_ids=[[1]], answer=["2"]) == [1.0]


def test_a_reward_list_of_the_wrong_length_gets_trls_error(tmp_path):
    """The count is TRL's check (its `_calculate_rewards` raises a ValueError naming the function); not repeated."""
    trainer = make(tiny_args(tmp_path, max_steps=1), reward=_too_short)
    with pytest.raises(ValueError, match=r"'_too_short'.*\b7\b.*\b8\b"):
        trainer.train()


def test_reward_output_check_accepts_sequences_of_numbers():
    import numpy as np

    from trl_entropy.trainers.grpo_entropy_trainer import check_reward_output

    assert check_reward_output("f", [1, 0.5, None, True], 4) == [1.0, 0.5, None, 1.0]
    assert check_reward_output("f", (np.float32(0.25), np.int64(2)), 2) == [0.25, 2.0]
    assert check_reward_output("f", np.array([0.5, 1.0]), 2) == [0.5, 1.0]
    assert check_reward_output("f", torch.tensor([0.5, 1.0]), 2) == [0.5, 1.0]
    assert check_reward_output("f", [float("nan")], 1)[0] != 0.0  # NaN is passed on; the trainer decides
    assert check_reward_output("f", [1.0], 2) == [1.0]  # the length is TRL's check


def _all_nan(completions, **kw):
    return [float("nan")] * len(completions)


def _first_nan(completions, **kw):
    return [float("nan") if i == 0 else float(c.count("1")) for i, c in enumerate(completions)]


def _trl_messages(caplog):
    from trl_entropy._trl_private import TRL_ALL_NONE_WARNING

    return [r.getMessage() for r in caplog.records if TRL_ALL_NONE_WARNING in r.getMessage()]


def test_nan_rewards_name_the_function_and_a_run_without_any_reward_stops(tmp_path, caplog):
    trainer = make(tiny_args(tmp_path, max_steps=6, max_unscorable_batches=2), reward=_all_nan)
    with pytest.warns(RuntimeWarning) as record, pytest.raises(
        RuntimeError, match=r"Step 1: no completion of the last 2 generation batches got a reward \('_all_nan' "
                            r"returned NaN for 8\).*max_unscorable_batches=2"):
        trainer.train()
    messages = [str(w.message) for w in record]
    assert any("reward function '_all_nan' returned NaN for 8 completion(s)" in m for m in messages)
    assert any("Step 0: no completion of this generation batch got a reward ('_all_nan' returned NaN for 8)" in m
               and "1 such batch(es) in a row; the run stops at max_unscorable_batches=2" in m for m in messages)
    assert trainer.state.global_step == 1  # stopped at the second batch, not silently at loss 0 until the end
    assert _trl_messages(caplog)  # TRL's own warning per unscorable row is left in place


def test_unscorable_batches_only_warn_with_no_limit(tmp_path):
    trainer = make(tiny_args(tmp_path, max_steps=3, max_unscorable_batches=None), reward=_all_nan)
    with pytest.warns(RuntimeWarning, match="no completion of this generation batch got a reward"):
        trainer.train()
    assert trainer.state.global_step == 3
    assert history(trainer, "entropy_control/unscorable_batches") == [1.0, 2.0, 3.0]


def test_fault_counters_survive_a_resume_and_each_checkpoint_writes_its_card_once(tmp_path, monkeypatch):
    """The running totals (here: batches without any reward, non-finite rewards) continue from a checkpoint instead of
    starting again at 0, with entropy_control="none" too; each checkpoint renders the model card once."""
    import trl_entropy.model_card as model_card

    renders = []
    render = model_card.render_model_card
    monkeypatch.setattr(model_card, "render_model_card", lambda *a, **k: renders.append(1) or render(*a, **k))
    kwargs = dict(max_steps=4, max_unscorable_batches=None, save_strategy="steps", save_steps=2, entropy_plots=False)
    straight = make(tiny_args(tmp_path / "a", **kwargs), reward=_all_nan)
    with pytest.warns(RuntimeWarning):
        straight.train()
    assert len(renders) == 2  # checkpoints 2 and 4
    assert history(straight, "entropy_control/unscorable_batches") == [1.0, 2.0, 3.0, 4.0]
    with open(tmp_path / "a" / "checkpoint-2" / CONTROL_STATE_FILE) as f:
        saved = json.load(f)
    assert saved["entropy_control"] == "none" and saved["counters"]["_ec_unscorable_batches"] == 2
    resumed = make(tiny_args(tmp_path / "a", **kwargs), reward=_all_nan)
    with pytest.warns(RuntimeWarning):
        resumed.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-2"))
    for key in ("unscorable_batches", "nonfinite_rewards"):
        # the checkpoint's history (steps 1-2), then the resumed steps 3-4
        assert history(resumed, f"entropy_control/{key}") == history(straight, f"entropy_control/{key}"), key
    assert resumed._ec_unscorable_streak == straight._ec_unscorable_streak == 4


def test_some_unscorable_completions_warn_with_the_function_and_nan(tmp_path, caplog):
    """Ours: the NaN, named with its function. TRL's: the warning for a row no reward function scored."""
    trainer = make(tiny_args(tmp_path, max_steps=2), reward=_first_nan)
    with pytest.warns(RuntimeWarning, match=r"reward function '_first_nan' returned NaN for 1 completion\(s\) "
                                            r"\(first at index 0\)"):
        trainer.train()
    assert trainer.state.global_step == 2 and _trl_messages(caplog)


def _constant(prompts, completions, **kwargs):
    return [0.0] * len(completions)  # a reward that never matches: every group flat


def test_batches_without_any_reward_spread_warn_once_that_only_the_entropy_term_trains(tmp_path):
    """A reward that scores every completion alike (e.g. one that never parses the completions) leaves no policy
    gradient: after three such generation batches in a row the run warns, once, and says the entropy control's own
    term is the only update; a reward with spread never warns."""
    args = tiny_args(tmp_path, max_steps=5, entropy_control="entropy_bonus", entropy_schedule="constant",
                     entropy_schedule_start=1.0)
    trainer = make(args, reward=_constant)
    with pytest.warns(RuntimeWarning) as record:
        trainer.train()
    flat = [str(w.message) for w in record if "got the same reward" in str(w.message)]
    assert len(flat) == 1 and flat[0].startswith("Step 2: in 3 generation batches in a row every group of 4")
    assert "(group rewards: 0.0)" in flat[0] and "entropy_control='entropy_bonus'" in flat[0]
    assert trainer.state.global_step == 5
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make(tiny_args(tmp_path / "spread", max_steps=4)).train()
    assert not [w for w in caught if "got the same reward" in str(w.message)]


def test_policy_signal_follows_trls_aggregation_by_hand():
    """Two functions, groups of 2: f2 = -2 * f1 with weights (2, 1). Summed first they cancel (no signal);
    normalised first they do not (2 z - z = z). f and -f with equal weights cancel either way (z - z = 0); f and
    -2 f with equal weights differ in the sum."""
    from trl_entropy.trainers.faults import _has_policy_signal

    f1 = torch.tensor([1.0, 0.0, 2.0, 2.0])
    rewards = torch.stack([f1, -2 * f1], dim=1)
    assert not _has_policy_signal(rewards, torch.tensor([2.0, 1.0]), 2, "sum_then_normalize")
    assert _has_policy_signal(rewards, torch.tensor([2.0, 1.0]), 2, "normalize_then_sum")
    assert _has_policy_signal(rewards, torch.tensor([1.0, 1.0]), 2, "sum_then_normalize")
    opposite = torch.stack([f1, -f1], dim=1)
    for aggregation in ("sum_then_normalize", "normalize_then_sum"):
        assert not _has_policy_signal(opposite, torch.tensor([1.0, 1.0]), 2, aggregation)
    flat = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, float("nan")], [0.0, 3.0]])  # NaN: that function gave none
    assert not _has_policy_signal(flat, torch.tensor([1.0, 1.0]), 2, "normalize_then_sum")
    assert not _has_policy_signal(flat, torch.tensor([1.0, 0.0]), 2, "sum_then_normalize")
    assert _has_policy_signal(flat, torch.tensor([0.0, 1.0]), 2, "sum_then_normalize")


def _ones(prompts, completions, **kwargs):
    return [float(c.count("1")) for c in completions]


def _minus_two_ones(prompts, completions, **kwargs):
    return [-2.0 * c.count("1") for c in completions]


@pytest.mark.parametrize("aggregation, warns", [("sum_then_normalize", True), ("normalize_then_sum", False)])
def test_rewards_that_cancel_in_the_sum_warn_only_where_trl_sums_first(tmp_path, aggregation, warns):
    """Weights (2, 1) on f and -2 f: TRL's summed reward is 0 everywhere (no gradient: warn), while normalising each
    function first leaves f's normalised reward (a gradient: no warning)."""
    import warnings

    args = tiny_args(tmp_path, max_steps=4, reward_weights=[2.0, 1.0], multi_objective_aggregation=aggregation)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make(args, reward=[_ones, _minus_two_ones]).train()
    flat = [str(w.message) for w in caught if "so every advantage is 0" in str(w.message)]
    assert len(flat) == (1 if warns else 0), flat


# ---------------------------------------------------------------------------------------------- configs
def test_a_control_that_ignores_the_target_logs_it_for_reference_without_a_tracking_error(tmp_path):
    with pytest.warns(UserWarning, match="does not follow a target entropy"):
        args = tiny_args(tmp_path, max_steps=2, entropy_control="kl_cov", kl_cov_ratio=0.1, steps_per_generation=2,
                         entropy_schedule="linear", entropy_schedule_start=2.0, entropy_schedule_end=1.0)
    trainer = make(args)
    trainer.train()
    assert history(trainer, "entropy_control/target") == pytest.approx([2.0, 1.0])
    assert len(history(trainer, "entropy_control/measured")) == 2
    assert not history(trainer, "entropy_control/tracking_error")
    assert not history(trainer, "entropy_control/relative_tracking_error")


def test_entropy_plots_no_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match=r"entropy_plots must be True or False, got 'no'"):
        tiny_args(tmp_path, entropy_plots="no")


# ---------------------------------------------------------------------------------------------- datasets
@pytest.mark.parametrize(
    "rows, overrides, message",
    [
        (0, {}, r"train_dataset is empty, but one generation batch needs 2 distinct prompts: "
                r"generation_batch_size / num_generations = 8 / 4"),
        (1, {}, r"train_dataset has 1 row\(s\), but one generation batch needs 2 distinct prompts"),
        (7, dict(steps_per_generation=4), r"has 7 row\(s\), but one generation batch needs 8 distinct prompts: "
                                          r"generation_batch_size / num_generations = 32 / 4, with "
                                          r"generation_batch_size = per_device_train_batch_size \(8\) x processes "
                                          r"\(1\) x steps_per_generation \(4\)"),
    ],
)
def test_a_dataset_smaller_than_one_generation_batch_is_refused_before_training(tmp_path, rows, overrides, message):
    from datasets import Dataset

    dataset = Dataset.from_dict({"prompt": [f"{i}+1=" for i in range(rows)]})
    with pytest.raises(ValueError, match=message):
        make(tiny_args(tmp_path, **overrides), dataset=dataset)


def test_the_smallest_dataset_that_fills_a_generation_batch_trains(tmp_path):
    trainer = make(tiny_args(tmp_path, max_steps=2, steps_per_generation=2), dataset=tiny_dataset(4))
    trainer.train()
    assert trainer.state.global_step == 2  # 4 rows = 16 / 4 prompts: exactly enough


def test_a_dataset_without_a_prompt_column_names_its_columns(tmp_path):
    from datasets import Dataset, DatasetDict

    dataset = Dataset.from_dict({"question": ["1+1=", "2+2="] * 4, "answer": ["2", "4"] * 4})
    with pytest.raises(ValueError, match=r"train_dataset has no 'prompt' column; its columns are "
                                         r"\['question', 'answer'\]"):
        make(tiny_args(tmp_path), dataset=dataset)
    with pytest.raises(ValueError, match=r"train_dataset is a DatasetDict with splits \['train'\]; pass one split"):
        make(tiny_args(tmp_path), dataset=DatasetDict(train=tiny_dataset()))


def test_an_iterable_dataset_is_not_size_checked(tmp_path):
    trainer = make(tiny_args(tmp_path), dataset=tiny_dataset(1).to_iterable_dataset())  # its length is unknown
    assert trainer.train_dataset is not None


# ---------------------------------------------------------------------------------------------- schedule end
def test_a_short_wsd_run_trains_its_last_step_at_the_end_target_and_the_card_says_so(tmp_path):
    args = tiny_args(tmp_path, max_steps=4, entropy_control="adaptive_clip", steps_per_generation=2,
                     entropy_schedule="wsd", entropy_schedule_start=2.0, entropy_schedule_end=1.0,
                     entropy_schedule_anneal_ratio=0.5)
    trainer = make(args)
    trainer.train()
    assert history(trainer, "entropy_control/target") == pytest.approx([2.0, 2.0, 2.0, 1.0])
    assert trainer.entropy_phase == "anneal" and trainer.entropy_target == pytest.approx(1.0)
    trainer.save_model()
    assert "against a target of **1.0000**" in (tmp_path / "README.md").read_text()


# ---------------------------------------------------------------------------------------------- metrics
def test_card_and_pictures_report_the_entropy_the_control_acts_on_not_trls_kept_only_entropy(tmp_path, monkeypatch):
    """Entrocraft with rejections: TRL's `entropy` covers kept rollouts only, `entropy_control/measured` all of them;
    the card and entropy_curves.png must show the latter."""
    import matplotlib.axes

    plotted = []
    real_plot = matplotlib.axes.Axes.plot

    def spy(ax, x, y, *args, **kwargs):
        plotted.append((kwargs.get("label"), list(y)))
        return real_plot(ax, x, y, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    args = tiny_args(tmp_path, max_steps=3, entropy_control="entrocraft", entrocraft_mode="hard",
                     entropy_schedule_start=0.5, steps_per_generation=2)  # far below the entropy: rejects negatives
    trainer = make(args)
    trainer.train()
    measured, trl_entropy = history(trainer, "entropy_control/measured"), history(trainer, "entropy")
    assert len(measured) == len(trl_entropy) == 3
    assert any(abs(a - b) > 1e-4 for a, b in zip(measured, trl_entropy))  # the two metrics do disagree here
    plotted.clear()
    trainer.save_model()
    card = (tmp_path / "README.md").read_text()
    assert f"measured entropy was **{measured[-1]:.4f}** nats" in card
    curve = next(y for label, y in plotted if label == "measured entropy")
    assert curve == pytest.approx(measured)


# ---------------------------------------------------------------------------------------------- model path
@pytest.mark.parametrize("name", ["/nonexistent/model", "./no-such-run/checkpoint-100"])
def test_a_missing_model_folder_is_no_such_folder_not_a_repo_id_error(tmp_path, name):
    with pytest.raises(FileNotFoundError, match=r"^model: no such folder: ") as info:
        GRPOEntropyTrainer(model=name, reward_funcs=count_ones_reward, args=tiny_args(tmp_path),
                           train_dataset=tiny_dataset())
    assert "Repo id" not in str(info.value)
    with pytest.raises(FileNotFoundError, match="no such folder"):  # also without args (the default output_dir)
        GRPOEntropyTrainer(model=name, reward_funcs=count_ones_reward)


def test_an_existing_model_folder_given_as_a_string_trains(tmp_path):
    folder = tmp_path / "model"
    tiny_model().save_pretrained(folder)
    trainer = GRPOEntropyTrainer(model=str(folder), reward_funcs=count_ones_reward,
                                 args=tiny_args(tmp_path / "out", max_steps=1), train_dataset=tiny_dataset(),
                                 processing_class=tiny_tokenizer())
    trainer.train()
    assert trainer.state.global_step == 1


# ------------------------------------------------------------------------------------------------- mistyped names
@pytest.mark.parametrize("field, typo, meant", [
    ("entropy_control", "entropy-bonus", "entropy_bonus"),
    ("entropy_control", "klcov", "kl_cov"),
    ("entropy_measurement", "generation-batch", "generation_batch"),
])
def test_a_mistyped_choice_names_the_one_meant(tmp_path, field, typo, meant):
    kwargs = {"entropy_control": "entropy_bonus", "entropy_schedule_start": 0.5, field: typo}
    with pytest.raises(ValueError, match=f"{field} must be one of .* Did you mean '{meant}'"):
        tiny_args(tmp_path, **kwargs)
    with pytest.raises(ValueError) as err:  # nothing close: no guess
        tiny_args(tmp_path, **{**kwargs, field: "zzz"})
    assert "Did you mean" not in str(err.value)
