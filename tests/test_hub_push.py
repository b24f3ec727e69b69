"""Pushing to the Hub when it cannot be reached: one clear error at construction, and a warning per failed
background checkpoint upload (transformers' Trainer pushes checkpoints with `upload_folder(run_as_future=True)` and
never looks at the outcome). No network: the two Hub calls are replaced."""

import warnings
from concurrent import futures

import pytest
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_model, tiny_tokenizer

from trl_entropy import GRPOEntropyTrainer
from trl_entropy.trainers.grpo_entropy_trainer import CONTROL_STATE_FILE

AC = dict(entropy_control="adaptive_clip", entropy_schedule_start=2.6, adaptive_clip_window=1,
          steps_per_generation=2, entropy_plots=False)


def make(args):
    return GRPOEntropyTrainer(model=tiny_model(), reward_funcs=count_ones_reward, args=args,
                              train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())


def hub_args(tmp_path, **kw):
    # hub_always_push: every save pushes, even when the previous upload is still running (deterministic counts)
    return tiny_args(tmp_path, max_steps=4, save_strategy="steps", save_steps=2, push_to_hub=True,
                     hub_model_id="someone/tiny-entropy", hub_always_push=True, **AC, **kw)


class FakeHub:
    """The repo exists; `upload_folder` runs in huggingface_hub's own background thread (its `run_as_future`), as
    the real one does, and fails there when `fail` is set."""

    def __init__(self):
        self.fail = False
        self.uploads = []

    def create_repo(self, api, repo_id, **kwargs):
        from huggingface_hub import RepoUrl

        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def upload_folder(self, api, **kwargs):
        self.uploads.append(kwargs["folder_path"])
        if self.fail:
            raise ConnectionError("simulated: 503 Service Unavailable")
        return None


@pytest.fixture
def hub(monkeypatch):
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import future_compatible

    fake = FakeHub()
    monkeypatch.setattr(HfApi, "create_repo", lambda api, repo_id, **kw: fake.create_repo(api, repo_id, **kw))

    def upload_folder(api, *, run_as_future: bool = False, **kw):
        return fake.upload_folder(api, **kw)

    monkeypatch.setattr(HfApi, "upload_folder", future_compatible(upload_folder))
    monkeypatch.setenv("HF_TOKEN", "hf_fake")
    return fake


def _failed_upload_warnings(caught):
    return [w for w in caught if issubclass(w.category, RuntimeWarning) and "Hub upload" in str(w.message)]


@pytest.mark.parametrize("strategy, jobs", [("every_save", 1), ("checkpoint", 2)])
def test_each_failed_checkpoint_upload_warns_and_the_checkpoint_stays_on_disk(tmp_path, hub, strategy, jobs):
    hub.fail = True
    trainer = make(hub_args(tmp_path, hub_strategy=strategy))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()  # the run goes on: the uploads fail in the background
    assert trainer.state.global_step == 4
    assert len(hub.uploads) == 2 * jobs  # two saves, each attempted
    failed = _failed_upload_warnings(caught)
    assert len(failed) == 2, [str(w.message) for w in failed]  # one per checkpoint
    for w, step in zip(failed, (2, 4)):
        folder = tmp_path / f"checkpoint-{step}"
        text = str(w.message)
        assert str(folder) in text and "someone/tiny-entropy" in text
        assert "ConnectionError: simulated: 503 Service Unavailable" in text
        assert "kept on disk" in text and f"hf upload someone/tiny-entropy {folder} checkpoint-{step}" in text
        if jobs == 2:
            assert "2 of its 2 uploads failed" in text
        assert (folder / "model.safetensors").exists() and (folder / CONTROL_STATE_FILE).exists()
    assert trainer._ec_pushes == []  # everything was reported


def test_successful_uploads_do_not_warn(tmp_path, hub):
    trainer = make(hub_args(tmp_path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert len(hub.uploads) == 2 and not _failed_upload_warnings(caught)


def test_a_failure_is_reported_at_the_next_save_not_only_at_the_end(tmp_path, hub):
    hub.fail = True
    trainer = make(hub_args(tmp_path))
    reported, phase = [], ["save"]
    report, finish = trainer._report_failed_pushes, trainer._finish_current_push

    def spy_report():
        for _, jobs in trainer._ec_pushes:  # let the background uploads finish (no timing dependence)
            futures.wait(jobs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report()
        reported.extend((phase[0], str(w.message)) for w in _failed_upload_warnings(caught))

    def spy_finish():
        phase[0] = "end"
        finish()

    trainer._report_failed_pushes, trainer._finish_current_push = spy_report, spy_finish
    trainer.train()
    # checkpoint-2's upload has failed in the background before the save of step 4, which reports it; checkpoint-4's is
    # reported at the end of training, after the Trainer waited for it
    assert [(when, "checkpoint-2" in text) for when, text in reported] == [("save", True), ("end", False)]
    assert "checkpoint-4" in reported[1][1]


def test_push_to_hub_with_the_hub_offline_fails_at_construction_with_one_short_error(tmp_path, monkeypatch):
    from huggingface_hub import constants
    from huggingface_hub.errors import OfflineModeIsEnabled

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_TOKEN", "hf_fake")
    with pytest.raises(RuntimeError, match=r"push_to_hub=True, but the Hugging Face Hub is unreachable") as info:
        make(hub_args(tmp_path))
    text = str(info.value)
    assert "OfflineModeIsEnabled" in text and "set push_to_hub=False" in text
    assert f"hf upload someone/tiny-entropy {tmp_path}" in text
    assert isinstance(info.value.__cause__, OfflineModeIsEnabled)  # the original is chained, not lost


def test_the_cli_prints_the_hub_error_as_one_line_and_exits_1(tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    from trl_entropy import cli
    from trl_entropy.trainers.faults import HubError

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_TOKEN", "hf_fake")
    monkeypatch.delenv("TRL_ENTROPY_DEBUG", raising=False)
    argv = ["grpo", "--testbed", "tiny", "--use_cpu", "true", "--bf16", "false", "--max_steps", "1",
            "--output_dir", str(tmp_path / "out"), "--push_to_hub", "true", "--hub_model_id", "someone/x",
            "--report_to", "none", "--per_device_train_batch_size", "4", "--num_generations", "4"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = next(x for x in err.splitlines() if x.startswith("trl-entropy grpo: error: "))
    assert "the Hugging Face Hub is unreachable" in line and "set push_to_hub=False" in line
    with pytest.raises(HubError):  # --debug shows the traceback
        cli.main(argv + ["--debug"])


def test_a_repo_that_cannot_be_created_for_another_reason_says_so(tmp_path, monkeypatch):
    from huggingface_hub import HfApi

    def refuse(api, repo_id, **kwargs):
        raise PermissionError("403 Forbidden: you cannot create repos in 'someone'")

    monkeypatch.setattr(HfApi, "create_repo", refuse)
    with pytest.raises(RuntimeError, match=r"the Hub repo 'someone/tiny-entropy' could not be created or opened "
                                           r"\(PermissionError: 403 Forbidden") as info:
        make(hub_args(tmp_path))
    assert "push_to_hub=False" in str(info.value) and "unreachable" not in str(info.value)
