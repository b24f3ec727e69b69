"""Model card contents, and Hub uploads with only huggingface_hub's network calls replaced (offline)."""

import json
import os
from concurrent.futures import Future

import pytest
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_model, tiny_tokenizer

from trl_entropy import GRPOEntropyTrainer
from trl_entropy.trainers.grpo_entropy_trainer import CONTROL_STATE_FILE

AC = dict(entropy_control="adaptive_clip", entropy_schedule="wsd", entropy_schedule_start=2.0,
          entropy_schedule_end=1.0, steps_per_generation=2)


def make(args):
    return GRPOEntropyTrainer(model=tiny_model(), reward_funcs=count_ones_reward, args=args,
                              train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())


def test_card_names_method_parameters_schedule_result_picture_and_citations(tmp_path):
    trainer = make(tiny_args(tmp_path, max_steps=4, **AC))
    trainer.train()
    trainer.save_model()
    card = (tmp_path / "README.md").read_text()
    assert "`adaptive_clip`" in card and "adaptive clip-higher" in card
    for field in ("adaptive_clip_delta", "adaptive_clip_window", "entropy_schedule_start", "entropy_schedule_anneal_ratio"):
        assert f"`{field}`" in card
    assert "H(t) = 2 while p < 1 − r, then decays linearly to 1" in card  # the WSD formula with its numbers
    measured = [h["entropy_control/measured"] for h in trainer.state.log_history if "entropy_control/measured" in h]
    target = [h["entropy_control/target"] for h in trainer.state.log_history if "entropy_control/target" in h]
    assert f"measured entropy was **{measured[-1]:.4f}** nats against a target of **{target[-1]:.4f}**" in card
    assert "![Measured entropy vs target](entropy_curves.png)" in card and (tmp_path / "entropy_curves.png").exists()
    assert "@inproceedings{wang-etal-2026-entropy" in card and "@software{vonwerra2020trl" in card
    assert "Entrocraft" not in card  # only the papers used are cited
    assert "tags:\n- trl\n- grpo\n- trl-entropy" in card


def test_card_lists_pass_at_k_when_evaluated(tmp_path):
    from trl_entropy import PassAtKCallback

    trainer = make(tiny_args(tmp_path, max_steps=2, entropy_control="entrocraft", entropy_schedule_start=2.0,
                             steps_per_generation=2))
    trainer.add_callback(PassAtKCallback(trainer, [{"prompt": "1+1="}, {"prompt": "2+2="}], n=4, ks=(1, 2, 4)))
    trainer.train()
    trainer.create_model_card()
    card = (tmp_path / "README.md").read_text()
    assert "| k | 1 | 2 | 4 |" in card and "@article{li2026entrocraft" in card and "entrocraft_gamma" in card


class FakeHub:
    """Stands in for the two network calls the Trainer makes through huggingface_hub.HfApi."""

    def __init__(self, fail=False):
        self.uploads, self.fail = [], fail

    def create_repo(self, api, repo_id, **kwargs):
        from huggingface_hub import RepoUrl

        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def upload_folder(self, api, **kwargs):
        folder = kwargs["folder_path"]
        self.uploads.append((folder, sorted(os.listdir(folder)), kwargs.get("path_in_repo")))
        if self.fail:
            raise ConnectionError("simulated upload failure")
        done = Future()
        done.set_result(None)
        return done


@pytest.fixture
def hub(monkeypatch):
    from huggingface_hub import HfApi

    fake = FakeHub()
    monkeypatch.setattr(HfApi, "create_repo", lambda api, repo_id, **kw: fake.create_repo(api, repo_id, **kw))
    monkeypatch.setattr(HfApi, "upload_folder", lambda api, **kw: fake.upload_folder(api, **kw))
    monkeypatch.setenv("HF_TOKEN", "hf_fake")
    return fake


def hub_args(tmp_path, **kw):
    return tiny_args(tmp_path, max_steps=4, save_strategy="steps", save_steps=2, push_to_hub=True,
                     hub_model_id="someone/tiny-entropy", **AC, **kw)


def test_each_checkpoint_push_uploads_card_and_pictures(tmp_path, hub):
    trainer = make(hub_args(tmp_path, hub_strategy="checkpoint"))
    trainer.train()
    out = [u for u in hub.uploads if u[0] == str(tmp_path)]
    ckpt = [u for u in hub.uploads if u[2] == "last-checkpoint"]
    assert len(out) == 2 and len(ckpt) == 2  # two saves, each pushes output_dir and the checkpoint
    for _, files, _ in out:
        assert {"README.md", "entropy_curves.png", "model.safetensors"} <= set(files)
    for folder, files, _ in ckpt:
        assert CONTROL_STATE_FILE in files  # the controller state travels with the checkpoint
    trainer.push_to_hub()
    assert hub.uploads[-1][0] == str(tmp_path) and "README.md" in hub.uploads[-1][1]


def test_hub_strategy_end_pushes_nothing_during_training(tmp_path, hub):
    trainer = make(hub_args(tmp_path, hub_strategy="end"))
    trainer.train()
    assert hub.uploads == []


def test_failed_upload_leaves_the_checkpoint_intact(tmp_path, hub):
    hub.fail = True
    trainer = make(hub_args(tmp_path, hub_strategy="checkpoint"))
    with pytest.raises(ConnectionError, match="simulated"):
        trainer.train()
    ckpt = tmp_path / "checkpoint-2"
    with open(ckpt / CONTROL_STATE_FILE) as f:
        assert json.load(f)["global_step"] == 2
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(ckpt)  # loads: the weights on disk are whole
    assert model is not None
    # and training resumes from it
    resumed = make(tiny_args(tmp_path, max_steps=4, save_strategy="no", **AC))
    resumed.train(resume_from_checkpoint=str(ckpt))
    assert resumed.state.global_step == 4
