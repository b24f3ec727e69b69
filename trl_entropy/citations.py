"""BibTeX entries of the papers the package's controls implement, keyed as the controls' ``citations`` name them,
and of TRL and this package (``trl``, ``trl_entropy``), which every model card cites.

A leaf: it imports nothing, so that a control's module, the config and the model card can all read it without
importing one another.
"""

__all__ = ["BIBTEX"]

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
    "he2025": """@article{he2025skywork,
  title   = {Skywork Open Reasoner 1 Technical Report},
  author  = {He, Jujie and Liu, Jiacai and Liu, Chris Yuhao and others},
  journal = {arXiv preprint arXiv:2505.22312},
  year    = {2025}
}""",
    # this package: every model card cites it (its url is urls.REPOSITORY_URL; tests/test_model_card.py checks it)
    "trl_entropy": """@software{trl_entropy,
  title  = {trl-entropy: policy entropy as a schedulable training hyperparameter for GRPO in Hugging Face TRL},
  author = {{The trl-entropy contributors}},
  url    = {https://github.com/trl-entropy/trl-entropy},
  year   = {2026}
}""",
    "trl": """@software{vonwerra2020trl,
  title  = {TRL: Transformer Reinforcement Learning},
  author = {von Werra, Leandro and Belkada, Younes and Tunstall, Lewis and Beeching, Edward and Thrush, Tristan and
            Lambert, Nathan and Huang, Shengyi and Rasul, Kashif and Gallou{\\'e}dec, Quentin},
  url    = {https://github.com/huggingface/trl},
  year   = {2020}
}""",
}
