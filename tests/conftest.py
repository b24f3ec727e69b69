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
