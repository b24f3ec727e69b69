"""Model cards for models trained with `GRPOEntropyTrainer`: method, parameters, schedule, outcome, citations.

The template is ``trl_entropy/model_cards/template.md`` (shipped with the package); :func:`render_model_card` fills it
from a trainer, and ``GRPOEntropyTrainer.create_model_card`` writes the result to ``output_dir/README.md``.
"""

from __future__ import annotations

import math
import os
from importlib import resources

__all__ = ["render_model_card", "METHOD_INFO", "BIBTEX"]

BIBTEX = {
    "wang2026": """@inproceedings{wang-etal-2026-entropy,
  title     = {Entropy Scheduling in Reinforcement Learning for Large Language Models},
  author    = {Wang, Xingjin and Tissue, Howe and Wang, Lu and Li, Linjing and Zeng, Daniel Dajun},
  booktitle = {Findings of the Association for Computational Linguistics: ACL 2026},
  year      = {2026},
  url       = {https://aclanthology.org/2026.findings-acl.206/}
}""",
    "cui2025": """@article{cui2025entropy,
  title   = {The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models},
  author  = {Cui, Ganqu and others},
  journal = {arXiv preprint arXiv:2505.22617},
  year    = {2025}
}""",
    "li2026": """@article{li2026entrocraft,
  title   = {Addressing Performance Saturation for LLM RL via Precise Entropy Curve Control},
  author  = {Li, Bolian and Wang, Yifan and Ding, Yi and Lochab, Anamika and Grama, Ananth and Zhang, Ruqi},
  journal = {arXiv preprint arXiv:2604.26326},
  year    = {2026}
}""",
    "jin2025": """@article{jin2025revisiting,
  title   = {Revisiting Entropy in Reinforcement Learning for Large Reasoning Models},
  author  = {Jin, Renren and Gao, Pengzhi and Ren, Yuqi and Han, Zhuowen and Zhang, Tongxuan and Huang, Wuwei and
             Liu, Wei and Luan, Jian and Xiong, Deyi},
  journal = {arXiv preprint arXiv:2511.05993},
  year    = {2025}
}""",
    "zhu2025": """@article{zhu2025negative,
  title   = {The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning},
  author  = {Zhu, Xinyu and others},
  journal = {arXiv preprint arXiv:2506.01347},
  year    = {2025}
}""",
    "yang2025": """@article{yang2025entropic,
  title   = {EntroPIC: entropy stabilization with proportional-integral control},
  author  = {Yang and others},
  journal = {arXiv preprint arXiv:2511.15248},
  year    = {2025}
}""",
    "trl": """@software{vonwerra2020trl,
  title  = {TRL: Transformer Reinforcement Learning},
  author = {von Werra, Leandro and Belkada, Younes and Tunstall, Lewis and Beeching, Edward and Thrush, Tristan and
            Lambert, Nathan and Huang, Shengyi and Rasul, Kashif and Gallou{\\'e}dec, Quentin},
  url    = {https://github.com/huggingface/trl},
  year   = {2020}
}""",
}

# control -> (description, config-field prefixes, citation keys)
METHOD_INFO = {
    "none": ("plain GRPO (no entropy control).", (), ()),
    "adaptive_clip": ("adaptive clip-higher (Entropy Scheduling, Wang et al. 2026, Algorithm 1): `epsilon_high` "
                      "moves by ±δ each optimizer step so the windowed measured entropy tracks the target.",
                      ("adaptive_clip_", "epsilon"), ("wang2026",)),
    "entrocraft": ("Entrocraft rollout rejection (Li et al. 2026): when entropy leaves the band around the target, "
                   "rollouts are rejected by the sign of their advantage.", ("entrocraft_",), ("li2026",)),
    "positive_reweight": ("positive-advantage reweighting (Jin et al. 2025): tokens with positive advantage are "
                          "weighted by λ ∈ [0, 1].", ("positive_reweight_",), ("jin2025",)),
    "w_reinforce": ("W-REINFORCE (Zhu et al. 2025): positive-advantage samples weighted by a fixed λ.",
                    ("w_reinforce_",), ("zhu2025",)),
    "clip_cov": ("Clip-Cov (Cui et al. 2025): a few tokens with high log-prob/advantage covariance are detached from "
                 "the gradient.", ("clip_cov_", "cov_scope"), ("cui2025",)),
    "kl_cov": ("KL-Cov (Cui et al. 2025): the tokens with the highest log-prob/advantage covariance get a KL penalty "
               "instead of the PPO clip.", ("kl_cov_", "cov_scope"), ("cui2025",)),
    "entropic": ("EntroPIC (Yang et al. 2025): a PI controller on entropy reweights high-probability tokens.",
                 ("entropic_",), ("yang2025",)),
}

SCHEDULE_FORMULAS = {
    "constant": "H(t) = {start}",
    "linear": "H(t) = {start} + ({end} − {start})·p",
    "cosine": "H(t) = {end} + ({start} − {end})·(1 + cos(π·p))/2",
    "wsd": "H(t) = {start} while p < 1 − r, then decays linearly to {end} over the last fraction r = {ratio} of "
           "training (warmup–stable–anneal)",
}


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if callable(v):  # a callable entropy_schedule: its name, not "<function <lambda> at 0x...>"
        from .scheduling.schedules import schedule_label

        return schedule_label(v)
    return str(v)


def _table(rows, header=("parameter", "value")) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| `{k}` | {_fmt(v)} |" for k, v in rows]
    return "\n".join(lines)


def _schedule_text(args) -> str:
    name = args.entropy_schedule
    if name is None:
        return "No target: this control does not follow an entropy schedule."
    if callable(name):
        return f"A user-supplied callable, `{_fmt(name)}`, gave the target as `fn(step, total_steps)`."
    start = args.entropy_schedule_start
    end = args.entropy_schedule_end if args.entropy_schedule_end is not None else start
    formula = SCHEDULE_FORMULAS[name].format(start=_fmt(start), end=_fmt(end), ratio=_fmt(args.entropy_schedule_anneal_ratio))
    warm = args.entropy_schedule_warmup_steps
    return (f"`{name}` schedule (nats per completion token): {formula}, where p ∈ [0, 1] is the fraction of training "
            f"done after {warm} warm-up step(s) that hold {_fmt(start)}.")


def _history_values(history, key):
    return [h[key] for h in history if key in h and isinstance(h[key], (int, float)) and math.isfinite(h[key])]


def render_model_card(trainer, model_name: str | None = None, base_model: str | None = None,
                      picture: str | None = "entropy_curves.png", output_dir: str | None = None) -> str:
    """The model card of ``trainer``'s run as Markdown (``picture``: a file in ``output_dir`` to embed, if present)."""
    import trl

    from . import __version__

    args = trainer.args
    control = getattr(args, "entropy_control", "none")
    description, prefixes, cites = METHOD_INFO.get(control, (control, (), ()))
    params = [(f, getattr(args, f)) for f in sorted(vars(args)) if any(f.startswith(p) for p in prefixes)]
    if getattr(args, "entropy_schedule", None) is not None:
        params += [(f, getattr(args, f)) for f in ("entropy_schedule", "entropy_schedule_start", "entropy_schedule_end",
                                                   "entropy_schedule_warmup_steps", "entropy_schedule_anneal_ratio")]
    history = trainer.state.log_history
    measured = _history_values(history, "entropy_control/measured") or _history_values(history, "entropy")
    targets = _history_values(history, "entropy_control/target")
    errors = _history_values(history, "entropy_control/relative_tracking_error")
    if measured:
        result = f"After {trainer.state.global_step} optimizer steps the measured entropy was **{measured[-1]:.4f}** nats"
        result += f" against a target of **{targets[-1]:.4f}**." if targets else "."
        if errors:
            tail = errors[len(errors) // 10:]
            result += f" Mean relative tracking error after the first 10% of steps: {100 * sum(tail) / len(tail):.1f}%."
        rewards = _history_values(history, "reward")
        if rewards:
            result += f" Final training reward: {rewards[-1]:.4f}."
    else:
        result = "No training steps were logged."
    pass_rows = [h for h in history if any(k.startswith("eval/pass@") for k in h)]
    if pass_rows:
        last = pass_rows[-1]
        ks = sorted(int(k.split("@")[1]) for k in last if k.startswith("eval/pass@"))
        pass_table = (f"pass@k on held-out problems (step {last.get('step')}):\n\n| k | " + " | ".join(map(str, ks))
                      + " |\n|---|" + "---|" * len(ks) + "\n| pass@k | "
                      + " | ".join(f"{last[f'eval/pass@{k}']:.3f}" for k in ks) + " |")
    else:
        pass_table = "pass@k was not evaluated."
    folder = output_dir or args.output_dir
    has_picture = picture and os.path.exists(os.path.join(folder, picture))
    entropy_picture = f"![Measured entropy vs target]({picture})" if has_picture else ""
    base = base_model or getattr(getattr(trainer.model, "config", None), "_name_or_path", None) or "unknown"
    tags = ["trl", "grpo", "trl-entropy", "entropy-control"] + ([control] if control != "none" else [])
    header = [f"base_model: {base}"] if base != "unknown" and not os.path.isdir(base) else []
    yaml_header = "\n".join(header + ["library_name: transformers", "tags:"] + [f"- {t}" for t in tags])
    training = [("max_steps", trainer.state.max_steps), ("learning_rate", args.learning_rate),
                ("num_generations", args.num_generations), ("steps_per_generation", args.steps_per_generation),
                ("num_iterations", args.num_iterations), ("loss_type", args.loss_type), ("beta", args.beta),
                ("epsilon", args.epsilon), ("epsilon_high", args.epsilon_high),
                ("max_completion_length", args.max_completion_length), ("temperature", args.temperature)]
    citations = "\n\n".join(f"```bibtex\n{BIBTEX[c]}\n```" for c in (*cites, "trl"))
    template = resources.files("trl_entropy").joinpath("model_cards/template.md").read_text(encoding="utf-8")
    return template.format(
        yaml_header=yaml_header,
        model_name=model_name or os.path.basename(os.path.normpath(folder)),
        base_model=(f"a local model (`{base}`)" if os.path.isdir(base) else base),
        trl_version=trl.__version__,
        package_version=__version__,
        entropy_control=control,
        method_description=description,
        parameter_table=_table(params) if params else "No method parameters.",
        schedule_description=_schedule_text(args),
        result_description=result,
        pass_at_k_table=pass_table,
        entropy_picture=entropy_picture,
        training_table=_table(training),
        citations=citations,
    )
