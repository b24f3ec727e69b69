"""Entrocraft with a KL penalty (beta > 0): TRL runs a reference-model forward after its old-log-prob pass; only the
policy's old-log-prob pass may give the rollout entropy ("scoring_pass"), never the reference pass."""

import pytest
import torch
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_model, tiny_tokenizer

from trl_entropy import GRPOEntropyTrainer

# off-policy (TRL runs its old-log-prob pass), a KL penalty (TRL runs the reference pass after it); gamma = 0 keeps
# every rollout, so runs that differ only in where the entropy comes from train exactly alike
COMMON = dict(max_steps=6, steps_per_generation=2, beta=0.04, entropy_control="entrocraft",
              entropy_schedule_start=1.0, entrocraft_gamma=0.0, learning_rate=3e-2)
KEY = "entropy_control/rollout_entropy"


def history(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


def lora_config():
    from peft import LoraConfig

    return LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM")


def run(tmp_path, name, model_dir, peft=None, train=True, **overrides):
    """``peft``: None (full fine-tuning), "config" (a LoRA `peft_config`: TRL's reference is the model with adapters
    disabled) or "wrapped" (a PEFT model passed in: TRL copies its adapter to a "ref" adapter for the reference)."""
    model, peft_config = str(model_dir), None
    if peft == "config":
        peft_config = lora_config()
    elif peft == "wrapped":
        from peft import get_peft_model
        from transformers import AutoModelForCausalLM

        torch.manual_seed(0)  # the adapter's initialisation, the same in every run
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), lora_config())
    kwargs = {**COMMON, **overrides}
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=count_ones_reward,
                                 args=tiny_args(tmp_path / name, **kwargs), train_dataset=tiny_dataset(),
                                 processing_class=tiny_tokenizer(), peft_config=peft_config)
    if train:
        trainer.train()
    return trainer


@pytest.fixture
def model_dir(tmp_path):
    # passed by path: TRL then builds a separate reference model (without PEFT), whose head gives no entropy
    path = tmp_path / "tiny"
    tiny_model().save_pretrained(path)
    return path


def test_scoring_pass_with_kl_penalty_trains(tmp_path, model_dir):
    """Used to crash at the first generation: the reference pass was asked for entropies its head does not give."""
    trainer = run(tmp_path, "a", model_dir, entrocraft_entropy_source="scoring_pass")
    assert len(history(trainer, KEY)) == 3  # one per generation


@pytest.mark.parametrize("peft", [None, "config", "wrapped"], ids=["full", "lora", "lora_ref_adapter"])
def test_scoring_pass_reads_the_policy_not_the_reference(tmp_path, model_dir, peft):
    """The entropy from TRL's old-log-prob pass is the policy's: the same as an extra no-grad pass on the policy at
    every generation, also after the policy has moved away from the reference (where the reference pass, which
    runs after it, would give another value)."""
    a = run(tmp_path, "a", model_dir, peft=peft, entrocraft_entropy_source="scoring_pass")
    b = run(tmp_path, "b", model_dir, peft=peft, entrocraft_entropy_source="extra_pass")
    for trainer in (a, b):
        assert history(trainer, "entropy_control/acceptance_rate") == [1.0, 1.0, 1.0]  # every rollout kept
    assert history(a, "loss") == pytest.approx(history(b, "loss"), rel=1e-5)  # both runs trained alike
    scored, extra = history(a, KEY), history(b, KEY)
    assert len(scored) == 3
    assert scored == pytest.approx(extra, rel=1e-5)
    assert abs(extra[2] - extra[0]) > 1e-3  # the policy has moved: a reference entropy would not match


@pytest.mark.parametrize("peft", [None, "config"], ids=["full", "lora"])
def test_lagged_reads_the_previous_update(tmp_path, model_dir, peft):
    """'lagged': an extra pass at the first generation, then the entropy the control measured at the previous
    optimizer step (the policy's loss forward; the reference pass never enters it)."""
    a = run(tmp_path, "a", model_dir, peft=peft, entrocraft_entropy_source="lagged")
    b = run(tmp_path, "b", model_dir, peft=peft, entrocraft_entropy_source="extra_pass")
    assert history(a, "entropy_control/acceptance_rate") == [1.0, 1.0, 1.0]
    records = [h for h in a.state.log_history if "entropy_control/measured" in h]
    assert len(records) == 6
    lagged = history(a, KEY)
    assert lagged[0] == pytest.approx(history(b, KEY)[0], rel=1e-5)
    # generations at optimizer steps 0, 2, 4; the rollout entropy is logged with the step that generated
    assert [records[i][KEY] for i in (0, 2, 4)] == lagged
    assert lagged[1:] == pytest.approx([records[1]["entropy_control/measured"],
                                        records[3]["entropy_control/measured"]], rel=1e-6)


@pytest.mark.parametrize("peft", [None, "config", "wrapped"], ids=["full", "lora", "lora_ref_adapter"])
def test_reference_forward_is_never_the_policy(tmp_path, model_dir, peft):
    """The discriminator on its own, whatever the order of the passes: each of TRL's reference forwards is refused."""
    from trl.trainer.utils import use_adapter

    trainer = run(tmp_path, "a", model_dir, peft=peft, entrocraft_entropy_source="scoring_pass", train=False)
    from trl_entropy.trainers.passes import is_policy_forward, peft_active_adapter

    adapter = peft_active_adapter(trainer)
    assert is_policy_forward(trainer, trainer.model, adapter)
    if peft is None:
        assert trainer.ref_model is not None and not is_policy_forward(trainer, trainer.ref_model, adapter)
        return
    assert trainer.ref_model is None
    model = trainer.accelerator.unwrap_model(trainer.model)
    assert ("ref" in model.peft_config) == (peft == "wrapped")
    with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):  # as TRL does
        assert not is_policy_forward(trainer, trainer.model, adapter)
    with model.disable_adapter():
        assert not is_policy_forward(trainer, trainer.model, adapter)
    assert is_policy_forward(trainer, trainer.model, adapter)


def plain_entropies(model, inputs, temperature):
    """Per-token entropies of the completion tokens from the model's ordinary forward (logits, no fused head): the
    same quantity as TRL's fused loss forward, computed independently of it and of the trainer's captures."""
    completion_ids = inputs["completion_ids"]
    input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
    attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits.float()
    logits = logits[:, -completion_ids.size(1) - 1:-1] / temperature  # the positions that predict the completion
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("peft", [None, "config"], ids=["full", "lora"])
def test_lagged_is_the_policy_entropy_not_the_reference(tmp_path, model_dir, peft):
    """'lagged' with a KL reference: at every generation after the first, the rollout entropy is the policy's entropy
    on the previous optimizer step's micro-batch, at the parameters of that step, and not the reference model's.

    Exact because of what 'lagged' is: the entropy measured in the previous step's loss forward (TRL's
    `_compute_loss` runs the policy only; the reference log-probs were computed at generation). So an independent
    no-grad forward of the policy on the same micro-batch, just before that loss forward (same parameters, same
    tokens, same loss mask), gives the same token-mean. The same forward through the reference (TRL's separate
    `ref_model`; with LoRA, the model with its adapters disabled) gives another value once the policy has moved, which
    the test checks too, so a capture that read the reference would fail it. One micro-batch per optimizer step
    (gradient_accumulation_steps=1) and one process: the step's measured entropy is that micro-batch's token-mean."""
    trainer = run(tmp_path, "a", model_dir, peft=peft, train=False, entrocraft_entropy_source="lagged",
                  learning_rate=1e-1)  # a LoRA policy moves slowly: a larger step parts it from the reference
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    seen = {}  # optimizer step -> (policy entropy, reference entropy) of its micro-batch
    compute_loss = trainer._compute_loss

    def recording_compute_loss(model, inputs):
        mask = inputs["ec_entropy_mask"].float()  # what the trainer measures: every rollout's completion tokens
        with torch.no_grad():
            policy = plain_entropies(trainer.model, inputs, trainer.temperature)
            if peft is None:
                reference = plain_entropies(trainer.ref_model, inputs, trainer.temperature)
            else:
                with unwrapped.disable_adapter():
                    reference = plain_entropies(trainer.model, inputs, trainer.temperature)
        step = trainer.state.global_step
        assert step not in seen  # one micro-batch per optimizer step
        seen[step] = tuple(float((h * mask).sum() / mask.sum()) for h in (policy, reference))
        return compute_loss(model, inputs)

    trainer._compute_loss = recording_compute_loss
    trainer.train()
    assert sorted(seen) == list(range(6))
    assert history(trainer, "entropy_control/acceptance_rate") == [1.0, 1.0, 1.0]  # gamma = 0: every rollout kept
    measured = history(trainer, "entropy_control/measured")
    assert measured == pytest.approx([seen[k][0] for k in range(6)], rel=1e-5)  # the loss forward is the policy's
    lagged = history(trainer, KEY)
    assert len(lagged) == 3  # generations at optimizer steps 0, 2, 4
    for g in (1, 2):
        policy, reference = seen[2 * g - 1]  # the last step before the generation
        assert lagged[g] == pytest.approx(policy, rel=1e-6)
        assert abs(lagged[g] - reference) > 1e-3, (g, lagged[g], reference)  # the policy has moved from the reference
