"""Shared fixtures: a tiny random character-level model and prompt set, built in code (no network)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

CHARS = list("0123456789+=")


def tiny_tokenizer():
    vocab = {"<pad>": 0, "<eos>": 1, **{c: i + 2 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", padding_side="left")


def tiny_model(seed=0):
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(CHARS) + 2,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config)


def tiny_model_or_path(config: dict, folder, seed=0):
    """The tiny model for a run with ``config`` (an entry of CONTROL_CONFIGS): the model itself, or, with a KL
    reference (``beta > 0``) and no PEFT, the folder it is saved to. TRL builds its reference model from the policy's
    path (``config._name_or_path``), which a model built in code does not have."""
    model = tiny_model(seed)
    if not config.get("beta"):
        return model
    model.save_pretrained(folder)
    return str(folder)


def count_ones_reward(completions, **kwargs):
    """A cheap verifiable-style reward: number of '1' characters (gives non-zero-std groups)."""
    return [float(c.count("1")) for c in completions]


def tiny_dataset(n=64):
    return Dataset.from_dict({"prompt": [f"{i % 50}+{(7 * i) % 50}=" for i in range(n)]})


# One entry per implemented entropy_control (and variants) with settings under which it acts on the tiny model.
# Tables of tests over every control (multi-process, resume, PEFT) use this; a new control is one line here.
CONTROL_CONFIGS = {
    "adaptive_clip": dict(entropy_control="adaptive_clip", entropy_schedule_start=2.6, adaptive_clip_window=1),
    "entrocraft": dict(entropy_control="entrocraft", entropy_schedule_start=2.6, entrocraft_gamma=1.0),
    "entrocraft_extra_pass": dict(entropy_control="entrocraft", entropy_schedule_start=2.6, entrocraft_gamma=1.0,
                                  entrocraft_entropy_source="extra_pass"),
    # with a KL reference (beta > 0, which TRL builds from the model's folder: see tiny_model_or_path); "lagged" reads
    # the previous step's measured entropy, which a checkpoint keeps
    "entrocraft_lagged_kl": dict(entropy_control="entrocraft", entropy_schedule_start=2.6, entrocraft_gamma=1.0,
                                 entrocraft_entropy_source="lagged", beta=0.04),
    "positive_reweight": dict(entropy_control="positive_reweight", entropy_schedule_start=2.6),
    "w_reinforce": dict(entropy_control="w_reinforce"),
    "kl_cov": dict(entropy_control="kl_cov", kl_cov_ratio=0.1),
    "clip_cov": dict(entropy_control="clip_cov", clip_cov_ratio=0.1, clip_cov_lb=-10.0, clip_cov_ub=10.0),
    "entropic": dict(entropy_control="entropic", entropy_schedule_start=2.6, entropic_high_prob_threshold=0.05),
    "entropy_bonus": dict(entropy_control="entropy_bonus", entropy_schedule_start=2.6),
    "entropy_bonus_initial": dict(entropy_control="entropy_bonus", entropy_schedule="wsd",
                                  entropy_schedule_start="initial", entropy_schedule_end="0.5*initial",
                                  entropy_schedule_anneal_ratio=0.5),
    # the control acts on the generation batch's ratio estimate (H_gen from TRL's old-log-prob pass, reduced over ranks)
    "entropy_bonus_generation_batch": dict(entropy_control="entropy_bonus", entropy_schedule_start=2.6,
                                           entropy_measurement="generation_batch"),
    "trl_adaptive": dict(entropy_control="trl_adaptive", entropy_schedule_start=2.6, entropy_coef_delta=0.01),
    # adaptive clip with a one-step-wide range: saturated at once, so the bonus takes over within the run
    "adaptive_clip_assist": dict(entropy_control="adaptive_clip", entropy_schedule_start=2.63, adaptive_clip_window=1,
                                 adaptive_clip_max=0.2, entropy_bonus_assist=True, entropy_bonus_assist_window=1),
}


def record_windows(trainer) -> list:
    """This rank's step sums (`trainer._ec_window`, as they enter the all-reduce) of every optimizer step, appended to
    the returned list as training runs (``None`` for a step without any)."""
    windows, reduce_window = [], trainer._reduce_window

    def recording():
        window = trainer._ec_window
        windows.append(None if window is None else [float(x) for x in window.tolist()])
        return reduce_window()

    trainer._reduce_window = recording
    return windows


def tiny_kwargs(tmp_path, **overrides):
    kwargs = dict(
        output_dir=str(tmp_path),
        max_steps=6,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=4,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    kwargs.update(overrides)
    return kwargs


def tiny_args(tmp_path, **overrides):
    from trl_entropy import GRPOEntropyConfig

    return GRPOEntropyConfig(**tiny_kwargs(tmp_path, **overrides))


@pytest.fixture
def tokenizer():
    return tiny_tokenizer()


# -- test tiers. The fast tier a contributor runs: python -m pytest -m "not slow and not vllm and not multiprocess"
#    (about a minute on 2 CPU cores); CI runs every test. `vllm` and `multiprocess` are marked in their files; `slow`
#    is every test below (by function: all its parametrisations), measured at 0.75 s or more on 2 busy CPU cores
#    (pytest --durations=0). tests/test_tiers.py checks that each name still exists. A DeepSpeed test
#    (`deepspeed`) launches 2 processes, so it is `multiprocess` too.
SLOW_TESTS = {
    "test_initial_precision.py": {"test_a_small_first_batch_is_pooled_with_rounds_aside_to_the_stated_precision"},
    "test_saturation_bonus.py": {"test_an_unreachable_target_saturates_the_bonus_within_a_25_step_run"},
    "test_bad_inputs.py": {"test_a_lambda_schedule_survives_checkpoints_resume_and_save_model",
        "test_fault_counters_survive_a_resume_and_each_checkpoint_writes_its_card_once",
        "test_a_short_wsd_run_trains_its_last_step_at_the_end_target_and_the_card_says_so",
        "test_batches_without_any_reward_spread_warn_once_that_only_the_entropy_term_trains",
        "test_card_and_pictures_report_the_entropy_the_control_acts_on_not_trls_kept_only_entropy"},
    "test_benchmarks.py": {"test_a_cached_run_is_not_served_once_the_package_defaults_change",
        "test_final_eval_evaluates_the_trained_policy_under_its_own_cache_key",
        "test_knob_authority_caches_runs_and_reprints",
        "test_late_policy_evaluates_mid_run_without_changing_the_run",
        "test_parallel_tracking_runs_each_job_into_its_own_cache_and_merges_them",
        "test_parallel_tracking_says_which_jobs_failed_and_exits_non_zero",
        "test_plot_tracking_draws_the_mean_over_seeds", "test_tracking_reports_the_smoothed_error"},
    "test_cli.py": {"test_grpo_trains_the_testbed_with_trl_and_dotted_rewards_and_says_where_it_saved"},
    "test_curriculum.py": {"test_phase_one_prompts_match_plain_trl",
        "test_schedule_driven_switch_and_resume_in_phase_two", "test_switch_at_step_on_plain_grpo_trainer"},
    "test_custom_control.py": {"test_the_example_control_trains_logs_and_is_on_the_card"},
    "test_demo.py": {"test_compare_on_the_headroom_testbed_scores_the_starting_model_and_draws_learning_curves",
        "test_run_demo_compare_writes_outputs"},
    "test_docs.py": {"test_api_reference_types_are_plain_not_trl_markdown", "test_readme_quickstart_runs_as_written"},
    "test_entrocraft_kl.py": {"test_lagged_is_the_policy_entropy_not_the_reference",
        "test_lagged_reads_the_previous_update", "test_scoring_pass_reads_the_policy_not_the_reference",
        "test_scoring_pass_with_kl_penalty_trains"},
    "test_entropy_bonus.py": {"test_a_bare_end_beside_a_relative_start_says_it_is_read_in_nats",
        "test_assist_takes_over_when_the_paper_knob_saturates",
        "test_fixed_negative_coefficient_equals_trl_static_penalty", "test_penalty_and_bonus_move_entropy_apart",
        "test_trl_adaptive_equals_grpo_trainer_with_schedule_callback"},
    "test_evaluation.py": {"test_evaluation_does_not_change_the_training_run",
        "test_fit_callback_logs_through_the_trainer", "test_pass_at_k_is_logged_during_training",
        "test_plots_are_written_at_each_save_and_at_the_end",
        "test_the_starting_model_is_scored_at_step_0_and_drawn_next_to_the_trained_one"},
    "test_examples.py": {"test_accelerate_example_runs_as_one_process", "test_lora_example_trains_an_adapter",
        "test_quickstart_example"},
    "test_gpu_check.py": {"test_the_smoke_mode_runs_every_check_on_cpu"},
    "test_measurement.py": {"test_the_step_reading_reaches_the_bonus_noise_cap",
        "test_where_a_step_covers_its_generation_batch_it_equals_the_step_reading",
        "test_with_training_the_estimate_moves_with_the_policy"},
    "test_model_card.py": {"test_a_default_settings_card_lists_its_few_essential_settings_and_folds_the_rest",
        "test_card_lists_pass_at_k_when_evaluated",
        "test_card_names_method_parameters_schedule_result_picture_and_citations",
        "test_card_shows_the_epsilon_high_used_and_the_knob_over_the_run",
        "test_each_checkpoint_push_uploads_card_and_pictures", "test_failed_upload_leaves_the_checkpoint_intact",
        "test_hub_strategy_end_pushes_nothing_during_training",
        "test_the_card_s_tracking_error_is_the_benchmarks_metric_and_says_so",
        "test_the_card_gives_the_initial_entropy_s_error_and_no_tracking_figures_without_a_target"},
    "test_notebook.py": {"test_quickstart_notebook_executes"},
    "test_policy_loss.py": {"test_training_loop_with_our_loss_matches_trl"},
    "test_recipes.py": {"test_testbed_recipe_trains_through_the_cli"},
    "test_rollout_controls.py": {"test_all_rejected_gives_finite_loss_warning_and_counter",
        "test_entrocraft_hard_below_band_keeps_only_negatives",
        "test_entrocraft_scoring_pass_entropy_equals_extra_pass",
        "test_entrocraft_with_everything_in_band_equals_plain_grpo",
        "test_positive_reweight_lambda_moves_with_entropy",
        "test_positive_reweight_proportional_term_acts_in_the_same_step",
        "test_positive_reweight_stage_progression_needs_no_target", "test_weight_one_equals_plain_grpo"},
    "test_saturation.py": {"test_entrocraft_outside_its_band_saturates",
        "test_reachable_knob_range_is_not_saturated", "test_saturation_state_survives_resume",
        "test_unreachable_target_saturates_adaptive_clip_and_warns_once"},
    "test_scale.py": {"test_an_async_callable_class_instance_is_awaited_not_wrapped",
        "test_every_control_trains_a_lora_adapter", "test_non_finite_rewards_are_reported_and_never_reach_the_loss",
        "test_resume_continues_every_control_exactly"},
    "test_signal_fraction.py": {"test_a_constant_reward_gives_a_zero_signal",
        "test_the_assist_s_bonus_gets_the_signal_too",
        "test_through_trl_the_controller_gets_each_steps_signal_fraction"},
    "test_smollm2.py": {"test_loader_converts_once_and_loads_a_real_llm",
        "test_the_smollm2_recipes_train_through_the_cli",
        "test_the_special_tokens_do_not_depend_on_how_a_release_reads_the_file",
        "test_two_grpo_steps_with_a_target_following_control", "test_two_grpo_steps_with_the_feedback_entropy_bonus"},
    "test_testbed.py": {"test_grpo_trainer_runs_on_the_testbed",
        "test_recipe_cache_key_is_the_same_in_another_process"},
    "test_token_controls.py": {"test_clip_cov_selected_tokens_get_zero_gradient",
        "test_controls_without_token_hooks_keep_trl_compute_loss",
        "test_global_scope_over_several_micro_batches_in_the_training_loop",
        "test_kl_cov_loss_includes_the_kl_term_on_selected_tokens", "test_short_training_run",
        "test_single_micro_batch_global_plan_runs_no_extra_forward_and_selects_the_same"},
    "test_trainer.py": {"test_adaptive_clip_changes_the_update_off_policy",
        "test_adaptive_clip_lowers_epsilon_high_when_entropy_far_above_target",
        "test_adaptive_clip_raises_epsilon_high_when_entropy_far_below_target",
        "test_adaptive_clip_warmup_holds_initial", "test_checkpoint_resume_continues_the_controller_exactly",
        "test_measured_entropy_is_token_weighted_over_micro_batches", "test_metrics_are_logged_each_step",
        "test_resume_with_a_different_control_raises", "test_schedule_callback_drives_plain_trl_adaptive_entropy",
        "test_schedule_target_follows_linear_schedule"},
    "test_trl_drift.py": {"test_imports_of_trl_names_are_exported_or_fenced",
        "test_only_trl_private_touches_private_names", "test_package_uses_no_unlisted_private_name"},
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("deepspeed") is not None:
            item.add_marker(pytest.mark.multiprocess)
        if getattr(item, "originalname", item.name) in SLOW_TESTS.get(item.path.name, ()):
            item.add_marker(pytest.mark.slow)
