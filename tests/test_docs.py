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


def test_readme_documents_the_fast_tier_with_registered_markers():
    """The README names the fast tier's command, and each marker it deselects is one pyproject.toml registers."""
    line = [ln for ln in _read(README).splitlines() if ln.startswith('python -m pytest -m "not ')]
    assert len(line) == 1, "the README's Install block lost the fast tier's command"
    expression = line[0].split('"')[1]
    assert expression == "not slow and not vllm and not multiprocess"
    pyproject = _read(os.path.join(ROOT, "pyproject.toml"))
    for marker in re.findall(r"not (\w+)", expression):
        assert f'"{marker}: ' in pyproject, f"marker {marker!r} is not registered in pyproject.toml"


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


EXTENSION = "docs/griffe_trl_style.py"  # mkdocs.yml's griffe extension for TRL-style parameter types


def _load_extension_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("griffe_trl_style", os.path.join(ROOT, EXTENSION))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _griffe_package(with_extensions: bool):
    """trl_entropy as mkdocstrings loads it for the API pages (mkdocs.yml's handler options, and its griffe extensions
    when `with_extensions`), statically: a fraction of a second, no mkdocs build."""
    griffe = pytest.importorskip("griffe")
    yaml = pytest.importorskip("yaml")
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        config = yaml.safe_load(f)
    handler = next(p["mkdocstrings"] for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p)
    options = handler["handlers"]["python"]["options"]
    assert EXTENSION in options.get("extensions", []), "mkdocs.yml no longer registers the griffe extension"
    extensions = [os.path.join(ROOT, e) for e in options["extensions"]] if with_extensions else []
    return griffe.load("trl_entropy", search_paths=[ROOT], extensions=griffe.load_extensions(*extensions),
                       docstring_parser=options["docstring_style"], docstring_options=options["docstring_options"],
                       resolve_aliases=False)


def _documented_items(obj):
    """{(object path, name): item} of every Parameters / Attributes item in the parsed docstrings of `obj` and of the
    objects defined under it."""
    items = {}
    if obj.docstring is not None:
        for section in obj.docstring.parsed:
            if section.kind.value in ("parameters", "other parameters", "attributes"):
                items.update(((obj.path, item.name), item) for item in section.value)
    for member in obj.members.values():
        if not member.is_alias:
            items.update(_documented_items(member))
    return items


def _literal(text):
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def test_api_reference_types_are_plain_not_trl_markdown():
    """The API pages' type column: TRL-style items `name (`float`, *optional*, defaults to `0.1`):` render as `float`
    (docs/griffe_trl_style.py, registered in mkdocs.yml), and the default that the docstring states is the one the
    Default column shows (the signature's), so nothing is lost by leaving it out of the type."""
    plain_type = _load_extension_module().plain_type
    raw_items = _documented_items(_griffe_package(with_extensions=False))
    items = _documented_items(_griffe_package(with_extensions=True))
    assert items.keys() == raw_items.keys()

    trl_style = {key: item for key, item in raw_items.items() if "`" in str(item.annotation)}
    config = "trl_entropy.trainers.grpo_entropy_config.GRPOEntropyConfig"
    # the config documents the shared fields; each control's settings group (trl_entropy/controls/<name>.py) its own
    groups = [key for key in trl_style if key[0].startswith("trl_entropy.controls.") and key[0].endswith("Settings")]
    assert len([key for key in trl_style if key[0] == config]) >= 14, "GRPOEntropyConfig's fields are TRL-style"
    assert len(groups) >= 40, "the controls' settings groups are TRL-style"
    assert ("trl_entropy.grpo_script.ScriptArguments", "dataset_prompt_column") in trl_style

    dirty = {key: str(i.annotation) for key, i in items.items() if re.search(r"[`*]|optional|defaults", str(i.annotation))}
    assert not dirty, f"type cells with markdown: {dirty}"
    lost = []
    for key, raw_item in trl_style.items():
        kind, default = plain_type(str(raw_item.annotation))
        assert str(items[key].annotation) == kind, (key, str(items[key].annotation), kind)
        shown = items[key].value
        if default is not None and (shown is None or _literal(str(shown)) != _literal(default)):
            lost.append((key, default, shown))
    assert not lost, f"stated defaults that the Default column does not show: {lost}"

    fields = {name: item for (path, name), item in items.items() if path == config}
    assert (str(fields["entropy_schedule_anneal_ratio"].annotation), str(fields["entropy_schedule_anneal_ratio"].value)) \
        == ("float", "0.1")
    assert str(fields["entropy_schedule_start"].annotation) == "float | str"
    assert str(fields["max_unscorable_batches"].annotation) == "int | None"
    assert str(fields["entropy_control"].value) == "'none'"
    assert plain_type("`dict[str, float]`, *optional*") == ("dict[str, float]", None)
    assert plain_type("*optional*, defaults to `None`") == ("", "None")


def _section(text, heading):
    """The lines under ``heading`` (a Markdown heading line) up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    after = text.split("\n" + heading + "\n", 1)[1]
    return re.split(rf"^#{{1,{len(level)}}} ", after, maxsplit=1, flags=re.M)[0]


def test_readme_recommends_entropy_bonus_only_for_following_a_schedule_and_its_status_is_what_ships():
    """Issue 62: the README called entropy_bonus "the recommendation" without saying for what, and half its Status
    table described a variant the package does not ship (acting on unsolved groups only: research code)."""
    text = _read(README)
    for line in text.splitlines():
        if "recommend" in line.lower():
            assert "schedule" in line, f"a recommendation that does not say what for: {line.strip()!r}"
    status = _section(text, "## Status")
    rows = [line for line in status.splitlines() if line.startswith("|")]
    assert rows and not [r for r in rows if "unsolved" in r or "study" in r], "Status describes what the package ships"
    assert "docs/payoff.md" in status


def test_payoff_page_opens_with_when_it_pays_in_one_screen():
    """docs/payoff.md opens with a one-screen answer: our verdict, the literature's, and what to run on your task."""
    text = _read(os.path.join(ROOT, "docs", "payoff.md"))
    first = re.findall(r"^## .*$", text, flags=re.M)[0]
    assert first == "## When does entropy control pay?"
    section = _section(text, first)
    assert len(section.strip().splitlines()) <= 45, "keep it to one screen"
    for needed in ("Our answer", "literature", "32B", "Find out on your task", "PassAtKCallback", "seed"):
        assert needed in section, needed
    (code,) = _code_blocks(section, "python")
    compile(code, "docs/payoff.md", "exec")  # it parses; my_model, my_reward, ... are the reader's


def test_getting_started_own_model_example_uses_the_control_that_holds_a_target():
    """Issue 62: the own-model example used adaptive_clip, which docs/choosing.md says holds no target."""
    from trl_entropy.demo.runner import DEFAULT_METHOD

    section = _section(_read(os.path.join(ROOT, "docs", "getting-started.md")), "## On your own model")
    (code,) = _code_blocks(section, "python")
    controls = re.findall(r'entropy_control="(\w+)"', code)
    assert controls == [DEFAULT_METHOD] == ["entropy_bonus"], controls
    assert "entropy_bonus" in _read(os.path.join(ROOT, "docs", "choosing.md")).split("\n## ", 1)[0]
