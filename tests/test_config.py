import functools
import os
import re
import warnings

import pytest

from trl_entropy import GRPOEntropyConfig

BASE = dict(output_dir="unused", use_cpu=True, bf16=False, report_to="none", per_device_train_batch_size=8,
            num_generations=4)
# off-policy: 4 optimizer steps per generation batch, so the clip bound acts
OFF = dict(steps_per_generation=4)
AC = dict(entropy_control="adaptive_clip", entropy_schedule_start=0.5, **OFF)
EC = dict(entropy_control="entrocraft", entropy_schedule_start=0.5, **OFF)


def cfg(**kw):
    return GRPOEntropyConfig(**{**BASE, **kw})


def test_defaults_are_plain_grpo():
    c = cfg()
    assert c.entropy_control == "none" and c.entropy_schedule is None


def test_target_control_defaults_to_constant_schedule():
    c = cfg(**AC)
    assert c.entropy_schedule == "constant"
    assert c.is_off_policy


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(entropy_control="bogus"), "entropy_control"),
        (dict(entropy_control="adaptive_clip", **OFF), "entropy_schedule_start"),
        (dict(entropy_schedule="linear"), "entropy_control='none'"),
        (dict(entropy_schedule_start=0.3), "entropy_control='none'"),
        (dict(AC, entropy_schedule="exponential"), "entropy_schedule"),
        (dict(AC, entropy_schedule_start=-0.1), "entropy_schedule_start"),
        (dict(AC, entropy_schedule_start=float("nan")), "entropy_schedule_start"),
        (dict(AC, entropy_schedule_end=-1.0), "entropy_schedule_end"),
        (dict(AC, entropy_schedule_warmup_steps=-3), "entropy_schedule_warmup_steps"),
        (dict(AC, entropy_schedule="wsd", entropy_schedule_anneal_ratio=0.0), "entropy_schedule_anneal_ratio"),
        (dict(AC, entropy_schedule="wsd", entropy_schedule_anneal_ratio=1.2), "entropy_schedule_anneal_ratio"),
        (dict(AC, adaptive_clip_delta=0.0), "adaptive_clip_delta"),
        (dict(AC, adaptive_clip_delta=-0.1), "adaptive_clip_delta"),
        (dict(AC, adaptive_clip_window=0), "adaptive_clip_window"),
        (dict(AC, adaptive_clip_min=-0.1), "adaptive_clip_min"),
        (dict(AC, adaptive_clip_min=0.5, adaptive_clip_max=0.4), "adaptive_clip_max"),
        (dict(AC, adaptive_clip_warmup_steps=-1), "adaptive_clip_warmup_steps"),
        (dict(AC, epsilon_high=1.5), "epsilon_high"),
        (dict(AC, loss_type="cispo"), "loss_type"),
        (dict(AC, loss_type="sapo"), "loss_type"),
        (dict(AC, use_adaptive_entropy=True), "allow_trl_adaptive_entropy"),
        (dict(AC, max_steps=10, entropy_schedule_warmup_steps=10), "entropy_schedule_warmup_steps"),
        (dict(AC, adaptive_clip_window=1.5), "adaptive_clip_window"),
        (dict(AC, adaptive_clip_min=0.3, epsilon_high=0.28), "epsilon_high"),
        (dict(EC, entrocraft_mode="soft"), "entrocraft_mode"),
        (dict(EC, entrocraft_normalizer="sum"), "entrocraft_normalizer"),
        (dict(EC, entrocraft_entropy_source="magic"), "entrocraft_entropy_source"),
        (dict(EC, entrocraft_gamma=-1.0), "entrocraft_gamma"),
        (dict(EC, entrocraft_band=-0.1), "entrocraft_band"),
        (dict(EC, steps_per_generation=None, entrocraft_entropy_source="scoring_pass"), "entrocraft_entropy_source"),
        (dict(entropy_control="entrocraft"), "entropy_schedule_start"),
        (dict(entropy_control="positive_reweight", positive_reweight_schedule="weekly"), "positive_reweight_schedule"),
        (dict(entropy_control="positive_reweight", entropy_schedule_start=0.5, positive_reweight_lambda_init=1.5),
         "positive_reweight_lambda_init"),
        (dict(entropy_control="positive_reweight", entropy_schedule_start=0.5, positive_reweight_step=0.0),
         "positive_reweight_step = 0 with positive_reweight_kp = 0"),
        (dict(entropy_control="positive_reweight", entropy_schedule_start=0.5, positive_reweight_kp=-1.0),
         "positive_reweight_kp"),
        (dict(entropy_control="positive_reweight", entropy_schedule_start=0.5, positive_reweight_kp=0.5,
              positive_reweight_step=-0.1), "positive_reweight_step"),
        (dict(entropy_control="positive_reweight", positive_reweight_schedule="epoch", positive_reweight_epochs=1),
         "positive_reweight_epochs"),
        (dict(entropy_control="w_reinforce", w_reinforce_lambda=2.0), "w_reinforce_lambda"),
        (dict(entropy_control="kl_cov", cov_scope="world", **OFF), "cov_scope"),
        (dict(entropy_control="clip_cov", clip_cov_ratio=1.5, **OFF), "clip_cov_ratio"),
        (dict(entropy_control="clip_cov", clip_cov_lb=5.0, clip_cov_ub=1.0, **OFF), "clip_cov_lb"),
        (dict(entropy_control="kl_cov", kl_cov_ratio=-0.1, **OFF), "kl_cov_ratio"),
        (dict(entropy_control="kl_cov", kl_cov_coef=-1.0, **OFF), "kl_cov_coef"),
        (dict(entropy_control="kl_cov", loss_type="cispo", **OFF), "loss_type"),
        (dict(entropy_control="clip_cov", use_adaptive_entropy=True, allow_trl_adaptive_entropy=True, **OFF),
         "use_adaptive_entropy"),
        (dict(entropy_control="entropic", entropy_schedule_start=0.5, entropic_high_prob_threshold=1.0),
         "entropic_high_prob_threshold"),
        (dict(entropy_control="entropic", entropy_schedule_start=0.5, entropic_kp=-1.0), "entropic_kp"),
        (dict(entropy_control="entropic", entropy_schedule_start=0.5, entropic_ki=float("inf")), "entropic_ki"),
        (dict(max_unscorable_batches=0), "max_unscorable_batches"),
        # issue 12: configs that used to run silently
        (dict(AC, entropy_schedule="linear"), "entropy_schedule_end"),
        (dict(AC, entropy_schedule="cosine"), "entropy_schedule_end"),
        (dict(AC, entropy_schedule="wsd"), "entropy_schedule_end"),
        (dict(entropy_schedule_end=0.2), "entropy_control='none'"),
        (dict(entropy_schedule_warmup_steps=5), "entropy_schedule_warmup_steps is set but entropy_control='none'"),
        (dict(entropy_schedule_anneal_ratio=0.3), "entropy_control='none'"),
        (dict(entropy_control="clip_cov", entropy_schedule="linear", entropy_schedule_end=0.2, **OFF),
         "entropy_schedule_start"),
        (dict(entropy_plots="no"), "entropy_plots"),
        (dict(entropy_plots=0), "entropy_plots"),
        (dict(entropy_plots=None), "entropy_plots"),
        (dict(AC, allow_trl_adaptive_entropy="yes"), "allow_trl_adaptive_entropy"),
        (dict(log_completions="no"), "log_completions"),  # inherited bool fields reject strings too
        (dict(bf16="false"), "bf16"),
        (dict(max_unscorable_batches=2.5), "max_unscorable_batches"),
        (dict(max_unscorable_batches=True), "max_unscorable_batches"),
    ],
)
def test_invalid_configs_name_the_field(kw, field):
    with pytest.raises(ValueError) as err:
        cfg(**kw)
    assert field in str(err.value)


def test_trl_adaptive_entropy_with_opt_in():
    c = cfg(**AC, use_adaptive_entropy=True, allow_trl_adaptive_entropy=True)
    assert c.use_adaptive_entropy


def test_on_policy_adaptive_clip_warns():
    with pytest.warns(UserWarning, match="on-policy"):
        c = cfg(entropy_control="adaptive_clip", entropy_schedule_start=0.5)
    assert not c.is_off_policy


@pytest.mark.parametrize(
    "kw, off",
    [
        (dict(), False),
        (dict(steps_per_generation=4), True),
        (dict(num_iterations=2), True),
        (dict(gradient_accumulation_steps=4, steps_per_generation=2), False),  # both generations before the update
        (dict(gradient_accumulation_steps=2, steps_per_generation=4), True),
    ],
)
def test_off_policy_detection_matches_trl(kw, off):
    assert cfg(**kw).is_off_policy is off


def test_off_policy_adaptive_clip_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        cfg(**AC)


def test_wsd_that_would_rise_names_both_fields():
    with pytest.raises(ValueError) as err:
        cfg(**AC, entropy_schedule="wsd", entropy_schedule_end=0.8)
    assert "entropy_schedule_end (0.8) > entropy_schedule_start (0.5)" in str(err.value)
    cfg(**AC, entropy_schedule="linear", entropy_schedule_end=0.8)  # a rising linear target is allowed


@pytest.mark.parametrize(
    "kw, reason",
    [
        (dict(entropy_control="clip_cov", entropy_schedule_start=0.5, **OFF), "does not follow a target"),
        (dict(entropy_control="kl_cov", entropy_schedule="linear", entropy_schedule_start=0.5,
              entropy_schedule_end=0.2, **OFF), "does not follow a target"),
        (dict(entropy_control="w_reinforce", entropy_schedule_start=0.5), "does not follow a target"),
        (dict(entropy_control="positive_reweight", positive_reweight_schedule="stage", entropy_schedule_start=0.5),
         "positive_reweight_schedule='stage' is a fixed progression"),
    ],
)
def test_a_schedule_on_a_control_that_does_not_follow_it_warns(kw, reason):
    with pytest.warns(UserWarning, match=reason) as record:
        c = cfg(**kw)
    assert any("for reference only (no tracking error)" in str(w.message) for w in record)
    assert c.entropy_schedule is not None  # built, so the target is still logged for reference


def test_constant_schedule_warns_that_it_ignores_the_end():
    with pytest.warns(UserWarning, match=r"entropy_schedule_end \(0.2\) is ignored: entropy_schedule is 'constant' "
                                         r"\(the default when entropy_schedule is unset\)"):
        cfg(**AC, entropy_schedule_end=0.2)


def test_bool_fields_accept_booleans():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", message="bf16=True with use_cpu")  # bf16=None resolves to True on a CPU
        c = cfg(entropy_plots=False, allow_trl_adaptive_entropy=True, log_completions=True, bf16=None)
    assert c.entropy_plots is False


def test_bool_check_reads_annotations_not_fields_rewritten_by_the_argument_parser():
    from transformers import HfArgumentParser

    HfArgumentParser(GRPOEntropyConfig)  # rewrites Field.type in place (e.g. `str | bool` becomes `bool`)
    assert cfg().include_num_input_tokens_seen == "no"  # a `str | bool` field keeps accepting its string default


def test_feedback_fields_under_a_fixed_lambda_progression_warn():
    with pytest.warns(UserWarning, match=r"positive_reweight_step, positive_reweight_kp are ignored: "
                                         r"positive_reweight_schedule='epoch' is a fixed progression"):
        cfg(entropy_control="positive_reweight", positive_reweight_schedule="epoch", positive_reweight_step=0.01,
            positive_reweight_kp=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        cfg(entropy_control="positive_reweight", positive_reweight_schedule="stage")
        cfg(entropy_control="positive_reweight", entropy_schedule_start=0.5, positive_reweight_kp=1.0)


def _one_argument(step):
    return 1.0


class _Schedule:
    def __call__(self, step, total_steps):
        return 1.0


@pytest.mark.parametrize("schedule, shown", [
    (lambda step: 1.0, r"signature \(step\)"),
    (_one_argument, r"'_one_argument' has the signature \(step\)"),
    (lambda: 1.0, r"signature \(\)"),
    (lambda step, total, extra: 1.0, r"missing a required argument: 'extra'"),
    (lambda step, total, *, key: 1.0, r"missing a required argument: 'key'"),
])
def test_a_callable_schedule_with_the_wrong_arity_is_refused_when_the_config_is_built(schedule, shown):
    with pytest.raises(ValueError, match=r"entropy_schedule .* is called as fn\(step, total_steps\)") as info:
        cfg(entropy_control="adaptive_clip", entropy_schedule=schedule, **OFF)
    assert re.search(shown, str(info.value)), str(info.value)


@pytest.mark.parametrize("schedule", [
    lambda step, total_steps: 1.0,
    lambda *args: 1.0,
    lambda step, total_steps=100, scale=1.0: 1.0,
    functools.partial(lambda scale, step, total_steps: scale, 1.0),
    functools.partial(lambda step, total_steps, scale: scale, scale=1.0),
    _Schedule(),
    max,  # a builtin: its signature cannot be read, so it is accepted unchecked
])
def test_callable_schedules_that_take_step_and_total_steps_are_accepted(schedule):
    assert cfg(entropy_control="adaptive_clip", entropy_schedule=schedule, **OFF).entropy_schedule is schedule


def test_reward_error_search_is_off_by_default_and_a_bool():
    assert cfg().reward_error_search is False
    assert cfg(reward_error_search=True).reward_error_search is True
    with pytest.raises(ValueError, match="reward_error_search must be True or False"):
        cfg(reward_error_search="yes")


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(AC, entropy_bonus_kp=0.5),
         r"entropy_bonus_kp \(entropy_control='entropy_bonus'\) set, but entropy_control='adaptive_clip' does not use "
         r"it: no effect on this run\. To give this control the feedback bonus as a second actuator, set "
         r"entropy_bonus_assist=True\."),
        (dict(entropy_control="entropy_bonus", entropy_schedule_start=0.5, entrocraft_gamma=5.0, cov_scope="local"),
         r"entrocraft_gamma \(entropy_control='entrocraft'\); cov_scope \(entropy_control='clip_cov' or 'kl_cov'\) "
         r"set, but entropy_control='entropy_bonus' does not use them"),
        (dict(entropy_bonus_min=-0.3), r"entropy_bonus_min .* entropy_control='none' does not use it"),
        (dict(entropy_control="trl_adaptive", entropy_schedule_start=0.5, entropy_bonus_max=1.0),
         r"entropy_bonus_max .* entropy_control='trl_adaptive' does not use it"),
    ],
)
def test_a_field_of_a_control_that_does_not_run_warns(kw, message):
    with pytest.warns(UserWarning, match=message):
        cfg(**kw)


@pytest.mark.parametrize(
    "kw",
    [
        dict(AC, adaptive_clip_delta=0.05, epsilon_high=0.4),  # its own fields; TRL's fields never count
        dict(AC, entropy_bonus_assist=True, entropy_bonus_kp=0.5),  # the assist runs the bonus's fields
        dict(entropy_control="kl_cov", cov_scope="local", kl_cov_ratio=0.01),
        dict(entropy_control="entropy_bonus", entropy_schedule_start=0.5, entropy_bonus_min=-0.3, entropy_coef=0.01),
        dict(AC, entrocraft_gamma=10.0),  # equal to its default: not set
    ],
)
def test_fields_of_the_running_control_do_not_warn(kw):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=r".*no effect on this run")
        cfg(**kw)


def test_bf16_on_a_cpu_without_bfloat16_instructions_warns(monkeypatch):
    """TRL's GRPOConfig turns bf16 on; on a CPU without bfloat16 instructions that is ~10x slower (measured on
    SmolLM2). Warned once at construction, with the fix; silent with bf16=False, on a GPU, or where the CPU has them."""
    import trl_entropy.trainers.grpo_entropy_config as module

    monkeypatch.setattr(module, "_cpu_has_bf16_instructions", lambda: False)
    with pytest.warns(UserWarning, match=r"bf16=True with use_cpu=True .* this CPU lists no bfloat16 instructions"
                                         r".*pass bf16=False \(--bf16 false\)"):
        cfg(bf16=True)
    monkeypatch.setattr(module, "_cpu_has_bf16_instructions", lambda: None)
    with pytest.warns(UserWarning, match=r"if this CPU has no bfloat16 instructions"):
        cfg(bf16=True)
    for has in (True, False):
        monkeypatch.setattr(module, "_cpu_has_bf16_instructions", lambda has=has: has)
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            cfg(bf16=False)
            if has:
                cfg(bf16=True)


def test_the_cpu_flags_are_read_from_proc_cpuinfo():
    from trl_entropy.trainers.grpo_entropy_config import _cpu_has_bf16_instructions

    found = _cpu_has_bf16_instructions()
    if os.path.exists("/proc/cpuinfo"):
        flags = next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "")
        assert found is (("avx512_bf16" in flags.split()) or ("amx_bf16" in flags.split())) if flags else found is None
    else:
        assert found is None


# TRL's own entropy fields that a control replaces (issue 53): a value set away from TRL's default is never silently
# dropped.
BONUS = dict(entropy_control="entropy_bonus", entropy_schedule_start=0.5)
TRL_RULE = dict(entropy_control="trl_adaptive", entropy_schedule_start=0.5)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(BONUS, entropy_target=0.5),
         r"entropy_target=0.5 set with entropy_control='entropy_bonus': it is the target of TRL's adaptive "
         r"coefficient .* does not run here; the control follows the schedule's target \(entropy_schedule_start=0.5\)"
         r", so entropy_target has no effect on this run"),
        (dict(TRL_RULE, entropy_target=0.3),
         r"entropy_target=0.3 set with entropy_control='trl_adaptive': the trainer overwrites it every optimizer step "
         r"with the schedule's target"),
        (dict(entropy_control="w_reinforce", entropy_target=0.3),
         r"entropy_target=0.3 .* this control follows no target"),
        (dict(BONUS, entropy_coef_max=0.3, entropy_coef_delta=0.01),
         r"entropy_coef_delta=0.01, entropy_coef_max=0.3 set: they are settings of TRL's adaptive entropy coefficient, "
         r"and entropy_control='entropy_bonus' moves the coefficient by its own law within \[entropy_bonus_min, "
         r"entropy_bonus_max\] = \[-0.5, 0.5\], so they have no effect on this run"),
        (dict(AC, entropy_coef_min=0.01),
         r"entropy_coef_min=0.01 set: it is a setting of TRL's adaptive entropy coefficient, and "
         r"entropy_control='adaptive_clip' does not run TRL's adaptive entropy coefficient"),
        (dict(AC, entropy_bonus_assist=True, entropy_coef=0.01),
         r"entropy_coef=0.01 set with entropy_control='adaptive_clip' and entropy_bonus_assist=True: the assist's "
         r"feedback bonus sets the entropy coefficient from the first optimizer step on"),
    ],
)
def test_a_trl_field_the_control_replaces_warns(kw, message):
    with pytest.warns(UserWarning, match=message) as record:
        cfg(**kw)
    assert [w.filename for w in record if re.search(message, str(w.message))] == [__file__]  # the caller's line


@pytest.mark.parametrize(
    "kw",
    [
        dict(BONUS, entropy_coef=0.01),  # the bonus's initial coefficient
        dict(TRL_RULE, entropy_coef=0.01, entropy_coef_delta=0.01, entropy_coef_max=0.5),  # TRL's rule runs them
        dict(AC, entropy_coef=0.01),  # a static bonus beside a paper's control
        dict(BONUS, top_entropy_quantile=0.2),  # the bonus acts on the tokens that train; measured over all
        dict(entropy_target=0.5, entropy_coef_max=0.3),  # plain GRPO is TRL's: its fields are TRL's business
        dict(BONUS, entropy_target=0.2),  # TRL's default value: not set
    ],
)
def test_trl_fields_a_control_uses_do_not_warn(kw):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=r".*no effect on this run")
        cfg(**kw)


def test_trl_rule_on_the_top_entropy_tokens_against_a_schedule_is_refused():
    with pytest.raises(ValueError, match=r"top_entropy_quantile=0.2 with entropy_control='trl_adaptive' .* measures "
                                         r"the entropy of the top-quantile tokens only.* Set top_entropy_quantile=1.0"):
        cfg(**TRL_RULE, top_entropy_quantile=0.2)


def test_a_target_given_as_entropy_target_alone_is_pointed_to_entropy_schedule_start():
    with pytest.raises(ValueError, match=r"entropy_schedule_start must be set .* pass entropy_schedule_start=0.5 "
                                         r"instead"):
        cfg(entropy_control="entropy_bonus", entropy_target=0.5)


def test_a_removed_setting_names_itself_the_value_kept_and_the_tag(tmp_path):
    """A setting a control no longer has (the bonus's variants cut after the tag `pre-law-cut`) is an error that says
    it was removed, what the control does now and where the setting still is: from Python, a recipe and a flag."""
    from trl_entropy import grpo_script
    from trl_entropy.controls import CONTROL_REGISTRY

    import dataclasses
    import inspect

    assert len(CONTROL_REGISTRY["entropy_bonus"].removed_settings) == 11
    fields = {f.name for f in dataclasses.fields(GRPOEntropyConfig)}
    for name, cls in CONTROL_REGISTRY.items():  # a removed name that is still a field would fail every config
        assert not set(cls.removed_settings) & fields, name
    assert list(inspect.signature(GRPOEntropyConfig).parameters)[0] == "output_dir"  # not __new__'s (*args, **kwargs)
    with pytest.raises(TypeError, match=r"entropy_bonus_integral_clip was removed .* acts as "
                                        r"entropy_bonus_integral_clip=1.0 did.*'pre-law-cut'"):
        cfg(entropy_control="entropy_bonus", entropy_schedule_start=0.5, entropy_bonus_integral_clip=2.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'entropy_bonus_nonsense'"):
        cfg(entropy_bonus_nonsense=1.0)  # any other unknown name: Python's own error
    recipe = tmp_path / "old.yaml"
    recipe.write_text("testbed: tiny\nentropy_bonus_antiwindup: conditional\n")
    with pytest.raises(grpo_script.UsageError, match="entropy_bonus_antiwindup was removed.*'pre-law-cut'"):
        grpo_script.parse_grpo_args(["--config", str(recipe)])
    with pytest.raises(grpo_script.UsageError, match="entropy_bonus_pull_gain was removed.*'pre-law-cut'"):
        grpo_script.parse_grpo_args(["--testbed", "tiny", "--entropy_bonus_pull_gain", "0.5"])
