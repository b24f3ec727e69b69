"""Answer-level diversity (issue 64): the pure functions on a hand-made batch, the default answer, the settings, and
the trainer's metrics against what its reward function saw."""

import math
import warnings

import pytest
import torch
from conftest import tiny_args, tiny_dataset, tiny_model, tiny_tokenizer

from trl_entropy.answer_diversity import (
    answer_diversity,
    answer_entropy,
    distinct_answers,
    group_values,
    mean_distinct_answers,
    outcome_entropies,
    outcome_entropy_sums,
    solved_groups,
)
from trl_entropy.trainers.answers import completion_answer, default_full_reward

NAN = float("nan")

# Three groups of four completions: their answers and rewards (full reward 1.0).
ANSWERS = ["7", "7", "8", "7",   # solved (a reward of 1): 2 distinct answers, shares 3/4 and 1/4
           "1", "2", "3", "4",   # unsolved (0, 0, NaN, 0: a NaN never counts): 4 distinct answers
           "5", "5", "5", "5"]   # solved by a reward a rounding error below 1: 1 distinct answer
REWARDS = [1.0, 0.0, 0.0, 1.0,
           0.0, 0.0, NAN, 0.0,
           0.0, 0.0, 0.5, 1.0 - 1e-9]
H_SOLVED_0 = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))  # 0.5623 nats


def test_every_metric_of_a_hand_made_batch_with_its_solved_unsolved_split():
    solved = solved_groups(REWARDS, 4, 1.0)
    assert solved == [True, False, True]
    got = answer_diversity(ANSWERS, solved, 4)
    assert set(got) == {"solved_groups", "distinct_answers", "answer_entropy", "distinct_answers_solved",
                        "answer_entropy_solved", "distinct_answers_unsolved", "answer_entropy_unsolved"}
    assert got["solved_groups"] == pytest.approx(2 / 3)
    assert got["distinct_answers"] == pytest.approx((2 + 4 + 1) / 3)
    assert got["answer_entropy"] == pytest.approx((H_SOLVED_0 + math.log(4) + 0.0) / 3)
    assert got["distinct_answers_solved"] == pytest.approx((2 + 1) / 2)
    assert got["answer_entropy_solved"] == pytest.approx(H_SOLVED_0 / 2)
    assert got["distinct_answers_unsolved"] == pytest.approx(4.0)
    assert got["answer_entropy_unsolved"] == pytest.approx(math.log(4))
    assert mean_distinct_answers(ANSWERS, 4) == pytest.approx(7 / 3)


def test_the_group_functions_and_their_edges():
    assert [distinct_answers(g) for g in group_values(ANSWERS, 4)] == [2, 4, 1]
    assert answer_entropy(["a", "a"]) == 0.0 and not math.copysign(1.0, answer_entropy(["a"])) < 0  # never -0.0
    assert answer_entropy(["a", "b", "c"]) == pytest.approx(math.log(3))
    assert answer_entropy([("x", 1), ("x", 1), 3]) == pytest.approx(-(2 / 3) * math.log(2 / 3) - math.log(1 / 3) / 3)
    # the full reward of two reward functions (weights 1 and 1): only a completion scoring 2 solves its group
    assert solved_groups([1.0, 1.0, 2.0, 0.0], 2, 2.0) == [False, True]
    assert solved_groups([NAN, NAN], 2, 1.0) == [False]
    # no solved group: the solved split is left out, never NaN
    assert set(answer_diversity(["a", "b"], [False], 2)) == {"solved_groups", "distinct_answers", "answer_entropy",
                                                             "distinct_answers_unsolved", "answer_entropy_unsolved"}
    assert answer_diversity([], [], 4) == {}
    with pytest.raises(ValueError, match="do not split into groups of 4"):
        group_values(ANSWERS[:6], 4)
    with pytest.raises(ValueError, match="group_size must be an integer >= 1"):
        group_values(ANSWERS, 0)
    with pytest.raises(ValueError, match="2 solved flags for 3 groups"):
        answer_diversity(ANSWERS, [True, False], 4)


def test_the_token_entropy_split_by_outcome():
    entropies = torch.tensor([[1.0, 2.0, 9.0], [3.0, 4.0, 5.0], [0.5, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    solved = torch.tensor([1.0, 0.0, 1.0])  # rows 0 and 2 belong to solved groups
    sums = outcome_entropy_sums(entropies, mask, solved)
    assert sums.tolist() == [1.0 + 2.0 + 0.5, 3.0, 3.0 + 4.0 + 5.0, 3.0]
    assert outcome_entropies(sums) == {"measured_solved": pytest.approx(3.5 / 3), "measured_unsolved": 4.0}
    # summed over micro-batches (as the trainer's all-reduce does), then divided
    both = sums + outcome_entropy_sums(entropies[:1], mask[:1], torch.tensor([0.0]))
    assert outcome_entropies(both)["measured_unsolved"] == pytest.approx((12.0 + 3.0) / 5)
    assert outcome_entropy_sums(entropies, mask, None).tolist() == [0.0] * 4  # no flags: nothing to split
    assert outcome_entropies([0.0, 0.0, 6.0, 3.0]) == {"measured_unsolved": 2.0}  # a split without tokens: left out


def test_the_default_answer_and_full_reward():
    assert completion_answer("  42 <eos>\n", "<eos>") == "42"
    assert completion_answer("<eos> 42<eos><eos>", "<eos>") == "42"
    assert completion_answer([{"role": "assistant", "content": " 7 "}], "</s>") == "7"
    assert completion_answer([{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text",
                                                                                              "text": "b "}]}]) == "ab"
    assert completion_answer(" x ", None) == "x"
    assert default_full_reward(torch.tensor([1.0, 0.5, -1.0])) == 1.5


def test_the_settings_are_checked_when_the_config_is_built(tmp_path):
    args = tiny_args(tmp_path, answer_extractor="trl_entropy.testbeds.addition.first_line", answer_full_reward=2)
    assert args.answer_extractor == "trl_entropy.testbeds.addition.first_line" and args.answer_full_reward == 2
    with pytest.raises(ValueError, match="answer_extractor 'trl_entropy.testbeds.addition.no_such': module .* has no 'no_such'"):
        tiny_args(tmp_path, answer_extractor="trl_entropy.testbeds.addition.no_such")
    with pytest.raises(ValueError, match="answer_extractor 'no_such_module_x.f': there is no module"):
        tiny_args(tmp_path, answer_extractor="no_such_module_x.f")
    with pytest.raises(ValueError, match=r"give it to the trainer: GRPOEntropyTrainer\(\.\.\., answer_extractor=fn\)"):
        tiny_args(tmp_path, answer_extractor=str.strip)
    with pytest.raises(ValueError, match="answer_full_reward must be a finite number or None"):
        tiny_args(tmp_path, answer_full_reward=math.inf)


def test_each_testbed_names_an_answer_extractor_that_imports(tmp_path):
    from trl_entropy import grpo_script
    from trl_entropy._imports import import_callable
    from trl_entropy.demo.testbed import extract_answer
    from trl_entropy.testbeds import TESTBEDS
    from trl_entropy.testbeds.addition import first_line

    extractors = {name: import_callable(make().answer_extractor, "answer_extractor") for name, make in
                  TESTBEDS.items()}
    assert extractors["tiny"] is extractors["tiny_headroom"] is extract_answer
    assert extractors["smollm2"] is extractors["smollm2_hard"] is first_line
    # `trl-entropy grpo --testbed NAME` fills it in, unless a flag or the recipe names one
    flags = ["--output_dir", str(tmp_path), "--use_cpu", "true", "--bf16", "false", "--testbed", "tiny_headroom"]
    assert grpo_script.parse_grpo_args(flags)[1].answer_extractor == TESTBEDS["tiny_headroom"]().answer_extractor
    mine = "trl_entropy.testbeds.addition:first_line"
    assert grpo_script.parse_grpo_args(flags + ["--answer_extractor", mine])[1].answer_extractor == mine


def _train(tmp_path, reward, **kwargs):
    from trl_entropy import GRPOEntropyTrainer

    answer_extractor = kwargs.pop("answer_extractor", None)
    args = tiny_args(tmp_path, max_steps=4, steps_per_generation=2, entropy_plots=False, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = GRPOEntropyTrainer(model=tiny_model(), reward_funcs=reward, args=args, train_dataset=tiny_dataset(),
                                     processing_class=tiny_tokenizer(), answer_extractor=answer_extractor)
        trainer.train()
    return trainer, [h for h in trainer.state.log_history if "loss" in h]


def test_the_trainer_logs_the_metrics_of_what_its_reward_function_saw(tmp_path):
    """Each generation batch's metrics are the pure functions' values on the completions the reward function got
    (answers by the trainer's extractor, groups of num_generations, solved: a reward of at least 1); the token entropy
    of solved and unsolved groups brackets the step's measured entropy."""
    batches = []

    def reward(completions, **kwargs):
        rewards = [float(c.count("1") >= 1) for c in completions]  # some groups solved, some not
        if "trainer_state" in kwargs:
            batches.append((list(completions), rewards))
        return rewards

    def first_char(completion):
        return completion.strip()[:1]

    trainer, rows = _train(tmp_path, reward, answer_extractor=first_char)
    assert trainer.answer_extractor is first_char and trainer.answer_full_reward == 1.0
    generated = [h for h in rows if "entropy_control/distinct_answers" in h]
    assert len(batches) == len(generated) == 2  # 4 steps, 2 per generation batch
    for (completions, rewards), h in zip(batches, generated):
        solved = solved_groups(rewards, 4, 1.0)
        expected = answer_diversity([first_char(c) for c in completions], solved, 4)
        logged = {k.removeprefix("entropy_control/"): v for k, v in h.items()
                  if k.startswith("entropy_control/") and ("answer" in k or k.endswith("solved_groups"))}
        assert logged == pytest.approx(expected)
    for h in rows:
        parts = [h[k] for k in ("entropy_control/measured_solved", "entropy_control/measured_unsolved") if k in h]
        assert parts and min(parts) - 1e-6 <= h["entropy_control/measured"] <= max(parts) + 1e-6


def test_with_every_group_unsolved_the_unsolved_entropy_is_the_measured_one(tmp_path):
    trainer, rows = _train(tmp_path, lambda completions, **kw: [0.0] * len(completions))
    assert trainer.answer_full_reward == 1.0  # one reward function of weight 1, at its full score
    for h in rows:
        assert "entropy_control/measured_solved" not in h and "entropy_control/distinct_answers_solved" not in h
        assert h["entropy_control/measured_unsolved"] == pytest.approx(h["entropy_control/measured"], rel=1e-6)
    generated = [h for h in rows if "entropy_control/solved_groups" in h]
    assert [h["entropy_control/solved_groups"] for h in generated] == [0.0, 0.0]
    # the default extractor (the text, stripped): at most 4 distinct answers in a group of 4
    assert all(1 <= h["entropy_control/distinct_answers_unsolved"] <= 4 for h in generated)


def test_an_extractor_given_twice_or_returning_an_unhashable_answer_is_an_error(tmp_path):
    from trl_entropy import GRPOEntropyTrainer

    def zero(completions, **kwargs):
        return [0.0] * len(completions)

    args = tiny_args(tmp_path, answer_extractor="trl_entropy.testbeds.addition.first_line")
    with pytest.raises(ValueError, match="answer_extractor is given twice"):
        GRPOEntropyTrainer(model=tiny_model(), reward_funcs=zero, args=args, train_dataset=tiny_dataset(),
                           processing_class=tiny_tokenizer(), answer_extractor=str.strip)
    with pytest.raises(TypeError, match="answer_extractor returned an unhashable list for completion 0"):
        _train(tmp_path, zero, answer_extractor=lambda completion: [completion])
