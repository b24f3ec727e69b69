"""The README and the docs stay true: the quickstart runs as written, links point at files that exist, and CI runs
the README's test command."""

import os
import re
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
QUICKSTART_MARKER = "<!-- quickstart: tests/test_docs.py executes this block -->"
QUICKSTART_MAX_STEPS = 50  # the README's quickstart must stay quick: the suite runs it as written


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _code_blocks(text, lang):
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)


def readme_quickstart() -> str:
    text = _read(README)
    assert QUICKSTART_MARKER in text, "the README's quickstart block lost its marker"
    after = text.split(QUICKSTART_MARKER, 1)[1]
    blocks = _code_blocks(after, "python")
    assert blocks, "no python block after the quickstart marker"
    return blocks[0]


def _links(text):
    """Targets of Markdown links [text](target), without titles."""
    return [m.split()[0] for m in re.findall(r"\]\(([^)\s]+(?:\s+\"[^\"]*\")?)\)", text)]


def test_readme_quickstart_runs_as_written(tmp_path, monkeypatch):
    code = readme_quickstart()
    steps = [int(s) for s in re.findall(r"max_steps\s*=\s*(\d+)", code)]
    assert steps and max(steps) <= QUICKSTART_MAX_STEPS, f"keep the quickstart short: max_steps={steps}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    namespace = {"__name__": "__readme_quickstart__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        exec(compile(code, "README.md:quickstart", "exec"), namespace)
    trainer = namespace["trainer"]
    assert trainer.state.global_step == max(steps)
    logged = [h for h in trainer.state.log_history if "entropy_control/measured" in h]
    assert logged and all("entropy_control/target" in h and "entropy_control/entropy_coef" in h for h in logged)
    assert trainer.initial_entropy is not None  # the "initial" target was resolved on the first batch


def test_readme_links_to_repository_files_exist():
    text = _read(README)
    local = [t for t in _links(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]
    assert local, "expected links into docs/ and examples/"
    missing = [t for t in local if not os.path.exists(os.path.join(ROOT, t.split("#", 1)[0]))]
    assert not missing, f"README links to files that do not exist: {missing}"
    outside = [t for t in local if not os.path.realpath(os.path.join(ROOT, t.split("#", 1)[0])).startswith(ROOT + os.sep)]
    assert not outside, f"README links outside the repository: {outside}"


def test_readme_opens_with_the_demo_and_test_commands_and_ci_runs_the_test_command():
    text = _read(README)
    first_block = _code_blocks(text, "bash")[0]
    assert text.index("```bash") < 1200, "the two commands must stay at the top of the README"
    commands = [line for line in first_block.splitlines() if line and not line.startswith("#")]
    demo = [c for c in commands if "trl-entropy demo" in c]
    test = [c for c in commands if c.rstrip().endswith("python -m pytest")]
    assert len(demo) == 1 and len(test) == 1, commands
    # .ci/run creates and activates its own venv, then runs the rest of the README's command (pip quietened).
    tail = test[0].split(". .venv/bin/activate && ", 1)[1]
    ci = _read(os.path.join(ROOT, ".ci", "run")).replace("pip install -q ", "pip install ")
    assert tail.strip() in [line.strip() for line in ci.splitlines()], (
        f".ci/run no longer runs the README's test command as a line of its own: {tail!r}")
    assert "mkdocs build --strict" in ci


def test_docs_pages_are_all_in_the_site_navigation():
    yaml = pytest.importorskip("yaml")
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        config = yaml.safe_load(f)

    def pages(nav):
        for item in nav:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            if isinstance(value, list):
                yield from pages(value)
            else:
                yield value

    in_nav = set(pages(config["nav"]))
    docs = os.path.join(ROOT, "docs")
    on_disk = {os.path.relpath(os.path.join(d, f), docs).replace(os.sep, "/")
               for d, _, files in os.walk(docs) for f in files if f.endswith(".md")}
    assert on_disk == in_nav, f"not in nav: {sorted(on_disk - in_nav)}; missing files: {sorted(in_nav - on_disk)}"
    assert "testbeds.md" in in_nav
    assert "SmolLM2-135M-Instruct (real pretrained LLM)" in _read(os.path.join(docs, "testbeds.md"))
