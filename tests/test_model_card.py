"""Model card contents, and Hub uploads with only huggingface_hub's network calls replaced (offline)."""

import json
import os
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_model, tiny_tokenizer

from trl_entropy import GRPOEntropyTrainer
from trl_entropy.model_card import render_model_card, resolve_base_model
from trl_entropy.urls import DOCUMENTATION_URL, ISSUES_URL, REPOSITORY_URL, project_urls
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
    assert "@software{trl_entropy," in card and f"url    = {{{REPOSITORY_URL}}}" in card  # the package cites itself
    assert "Entrocraft" not in card  # only the papers used are cited
    assert "tags:\n- trl\n- grpo\n- trl-entropy" in card
    assert "library_name: transformers" in card and "adapter" not in card
    # the project's addresses (pyproject.toml [project.urls], trl_entropy.urls), not a placeholder
    assert f"[trl-entropy]({REPOSITORY_URL})" in card and f"([documentation]({DOCUMENTATION_URL}))" in card


SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_card_shows_the_epsilon_high_used_and_the_knob_over_the_run(tmp_path):
    trainer = make(tiny_args(tmp_path / "out", max_steps=4, **{**AC, "adaptive_clip_window": 1}))
    assert trainer.args.epsilon_high is None  # TRL then clips at epsilon
    trainer.train()
    card = render_model_card(trainer)
    assert "| `epsilon_high` | None |" not in card
    assert card.count("| `epsilon_high` | 0.2 (unset; TRL uses `epsilon`) |") == 2  # method and training tables
    used = [h["entropy_control/epsilon_high"] for h in trainer.state.log_history if "entropy_control/epsilon_high" in h]
    final = trainer.entropy_control.knob
    assert min(used) < max(used) and final != used[-1]  # it moved, and the last update is not in the log
    assert (f"**Knob** `epsilon_high`: started at 0.2 (unset; TRL uses `epsilon`), ranged over [{min(used):.4g}, "
            f"{max(used):.4g}] in the 4 logged step(s), ended at **{final:.4g}** (after the last update).") in card
    # nothing saved in output_dir yet: the "Use" section says so instead of pointing a pipeline at an empty folder
    out = trainer.args.output_dir
    assert f"`{out}` held no model weights when this card was written" in card
    assert f'trainer.save_model("{out}")' in card and "--save_models" in card
    trainer.save_model()  # weights first, then the card: it loads what is there
    assert "held no model weights" not in (tmp_path / "out" / "README.md").read_text()
    assert "held no model weights" not in render_model_card(trainer)


def test_card_names_the_hub_base_model_of_a_local_folder(tmp_path):
    local = tmp_path / "smollm2"
    local.mkdir()
    trainer = make(tiny_args(tmp_path / "out", max_steps=1, model_card_base_model=SMOL))
    trainer.model.config._name_or_path = str(local)  # as from_pretrained(local folder) sets it
    card = render_model_card(trainer)
    assert f"base_model: {SMOL}\n" in card and f"trained from **{SMOL}** (from a local copy)" in card
    assert str(local) not in card
    trainer.args.model_card_base_model = None  # without the field: the local folder, and no base_model
    card = render_model_card(trainer)
    assert "base_model:" not in card and f"trained from a local model (`{local}`) with GRPO" in card


def test_resolve_base_model():
    def fake(name, configured=None):
        return SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(_name_or_path=name)),
                               args=SimpleNamespace(model_card_base_model=configured))

    here = os.path.dirname(__file__)
    snapshot = f"/data/hf/hub/models--{SMOL.replace('/', '--')}/snapshots/0123abcd"
    assert resolve_base_model(fake("Qwen/Qwen2.5-0.5B-Instruct")) == ("Qwen/Qwen2.5-0.5B-Instruct", None)
    assert resolve_base_model(fake("gpt2")) == ("gpt2", None)
    assert resolve_base_model(fake(here)) == (None, here)  # an existing folder, whatever its name
    assert resolve_base_model(fake(here, configured=SMOL)) == (SMOL, here)
    assert resolve_base_model(fake("Qwen/Qwen2.5-0.5B", configured=SMOL)) == (SMOL, None)  # the field wins
    assert resolve_base_model(fake(snapshot)) == (SMOL, snapshot)  # a Hugging Face cache snapshot
    assert resolve_base_model(fake(snapshot + "/")) == (SMOL, snapshot + "/")
    assert resolve_base_model(fake("/no/such/folder")) == (None, "/no/such/folder")
    assert resolve_base_model(fake("")) == (None, None)
    assert resolve_base_model(fake(here), base_model=SMOL) == (SMOL, None)  # render_model_card(base_model=...)


def test_model_card_base_model_must_be_a_hub_id(tmp_path):
    for bad in ("./models/smollm2", "/abs/path", "a/b/c", "owner--x/name", ""):
        with pytest.raises(ValueError, match="model_card_base_model must be a Hugging Face Hub model id"):
            tiny_args(tmp_path, model_card_base_model=bad)
    assert tiny_args(tmp_path, model_card_base_model=SMOL).model_card_base_model == SMOL


def test_lora_adapter_card_says_peft_and_loads_as_it_says(tmp_path):
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM

    tiny_model().save_pretrained(tmp_path / "base")
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                             task_type="CAUSAL_LM")
    trainer = GRPOEntropyTrainer(model=base, reward_funcs=count_ones_reward,
                                 args=tiny_args(tmp_path / "out", max_steps=1, entropy_plots=False),
                                 train_dataset=tiny_dataset(), processing_class=tiny_tokenizer(),
                                 peft_config=peft_config)
    trainer.train()
    trainer.save_model()
    card = (tmp_path / "out" / "README.md").read_text()
    assert "library_name: peft" in card and "library_name: transformers" not in card and "\n- lora\n" in card
    assert "This LoRA adapter was trained from" in card and "holds a LoRA adapter only" in card
    for row in ("| `peft_type` | LORA |", "| `r` | 4 |", "| `lora_alpha` | 8 |",
                "| `target_modules` | q_proj, v_proj |"):
        assert row in card
    snippet = card.split("```python\n", 1)[1].split("```", 1)[0]
    scope = {}
    exec(snippet, scope)  # the card's own loading code, as a reader would run it
    assert type(scope["model"]).__name__ == "Qwen2ForCausalLM"


def test_project_urls_match_pyproject_and_prefer_installed_metadata(monkeypatch):
    tomllib = pytest.importorskip("tomllib")
    with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
        declared = tomllib.load(f)["project"]["urls"]
    assert declared == {"Repository": REPOSITORY_URL, "Documentation": DOCUMENTATION_URL, "Issues": ISSUES_URL}
    from importlib import metadata

    class Meta:
        def get_all(self, key):
            return ["Repository, https://example.org/moved"] if key == "Project-URL" else None

    monkeypatch.setattr(metadata, "metadata", lambda name: Meta())
    assert project_urls() == {**declared, "Repository": "https://example.org/moved"}

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "metadata", missing)
    assert project_urls() == declared


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
    assert 'pipeline("text-generation", model="someone/tiny-entropy")' in (tmp_path / "README.md").read_text()


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


def _main_settings(card):
    """The rows of the card's main table of settings: between the method's paragraph and the collapsed list."""
    section = card.split("## Entropy control", 1)[1].split("<details>", 1)[0]
    return [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]


BONUS_WSD = dict(entropy_control="entropy_bonus", entropy_schedule="wsd", entropy_schedule_start="initial",
                 entropy_schedule_end="0.5*initial")


def test_a_default_settings_card_lists_its_few_essential_settings_and_folds_the_rest(tmp_path):
    """Issue 53: the card listed ~30 entropy_bonus_* settings. A run at the defaults shows the control, its target
    and the versions whose defaults fix the rest; every setting is in a collapsed section below."""
    trainer = make(tiny_args(tmp_path, max_steps=2, **BONUS_WSD))
    trainer.train()
    card = render_model_card(trainer)
    import trl

    from trl_entropy import __version__

    main = _main_settings(card)
    assert len(main) <= 10, main
    assert main == ["entropy_control", "entropy_schedule", "entropy_schedule_start", "entropy_schedule_end",
                    "trl-entropy", "trl"]
    assert "| `entropy_control` | entropy_bonus |" in card and f"| `trl-entropy` | {__version__} |" in card
    assert (f"Every other setting of the method is at its default in trl-entropy {__version__} and TRL "
            f"{trl.__version__}.") in card
    details = card.split("<details>", 1)[1].split("</details>", 1)[0]
    assert "<summary>All " in details and "| `entropy_bonus_kp` | 0.25 |" in details
    assert "| `entropy_bonus_kp`" not in card.split("<details>", 1)[0]


def test_settings_that_differ_from_their_defaults_are_in_the_main_table(tmp_path):
    trainer = make(tiny_args(tmp_path, max_steps=1, **BONUS_WSD, entropy_bonus_kp=0.5, entropy_coef=0.01))
    trainer.train()
    card = render_model_card(trainer)
    main = _main_settings(card)
    assert "entropy_bonus_kp" in main and "entropy_coef" in main and "entropy_bonus_ki" not in main
    assert "| `entropy_bonus_kp` | 0.5 |" in card.split("<details>", 1)[0]
    # the note names them and their defaults (issue 62: it said "2 setting(s) ... differ (listed above)")
    assert "Changed from their defaults: `entropy_bonus_kp` (default 0.25), `entropy_coef` (default 0)" in card
    assert "setting(s)" not in card


def test_the_card_s_tracking_error_is_the_benchmarks_metric_and_says_so(tmp_path):
    """One definition of the tracking error everywhere (issue 53): the MA10 error after the first 20% of steps."""
    from trl_entropy.metrics import TRACKING_ERROR_DEFINITION, tracking_error

    trainer = make(tiny_args(tmp_path, max_steps=6, **AC))
    trainer.train()
    card = render_model_card(trainer)
    rows = [h for h in trainer.state.log_history if "entropy_control/relative_tracking_error" in h]
    err = tracking_error([h["entropy_control/measured"] for h in rows], [h["entropy_control/target"] for h in rows])
    assert f"Tracking error: **{100 * err:.1f}%** ({TRACKING_ERROR_DEFINITION})." in card
    assert "after the first 10% of steps" not in card
    # and the share of steps beyond +-30% of the target (issue 61), in the card and in entropy_curves.png's title
    from trl_entropy.evaluation import training_figures
    from trl_entropy.metrics import OUT_OF_BAND_DEFINITION, out_of_band_share

    out = out_of_band_share([h["entropy_control/measured"] for h in rows], [h["entropy_control/target"] for h in rows])
    assert f"Steps beyond ±30% of the target: **{100 * out:.0f}%** ({OUT_OF_BAND_DEFINITION})." in card
    title = training_figures(trainer.state.log_history)["entropy_curves.png"].axes[0].get_title()
    assert title == f"Policy entropy vs target\ntracking error {100 * err:.1f}%, {100 * out:.0f}% of steps beyond ±30%"


def test_the_card_gives_the_initial_entropy_s_error_and_no_tracking_figures_without_a_target(tmp_path):
    """Issue 61: the initial entropy a relative target rests on, with its standard error; a run that followed no target
    states no tracking error and no share of steps beyond the band, on the card or in its picture."""
    from trl_entropy.evaluation import training_figures

    trainer = make(tiny_args(tmp_path / "wsd", max_steps=3, **BONUS_WSD))
    trainer.train()
    card = render_model_card(trainer)
    assert trainer.initial_entropy is not None and trainer.initial_entropy_se is not None
    assert f"**{trainer.initial_entropy:.4f} ± {trainer.initial_entropy_se:.4f}** nats (± its standard error" in card
    assert "Tracking error: **" in card and "Steps beyond ±30% of the target: **" in card
    plain = make(tiny_args(tmp_path / "none", max_steps=2))
    plain.train()
    card = render_model_card(plain)
    assert "Tracking error" not in card and "±30%" not in card and " ± " not in card
    assert training_figures(plain.state.log_history)["entropy_curves.png"].axes[0].get_title() == (
        "Policy entropy vs target")


def test_the_card_shows_every_picture_it_writes_and_the_demo_s_final_reward(tmp_path):
    """Issue 62: the card wrote entropy_knob.png and reward.png without showing them, and its "final training
    reward" was the last logged reward (0.6289) where the demo's table showed the mean of the last 10% (0.559)."""
    from trl_entropy.metrics import FINAL_REWARD_DEFINITION, final_reward

    trainer = make(tiny_args(tmp_path, max_steps=4, **AC))
    trainer.train()
    trainer.save_model()
    card = (tmp_path / "README.md").read_text()
    pictures = sorted(p.name for p in tmp_path.glob("*.png"))
    assert {"entropy_curves.png", "entropy_knob.png", "reward.png"} <= set(pictures)
    for name in pictures:
        assert f"]({name})" in card, name
    assert card.index("](entropy_knob.png)") < card.index("## Target entropy schedule")  # under the knob's line
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    assert f"Final training reward: **{final_reward(rewards):.3f}**, {FINAL_REWARD_DEFINITION}." in card


def test_the_package_s_bibtex_points_at_its_repository():
    from trl_entropy.citations import BIBTEX

    assert f"url    = {{{REPOSITORY_URL}}}" in BIBTEX["trl_entropy"]
