"""`check_model_path`: a model path that does not exist says "no such folder" instead of transformers' "Repo id must
be in the form 'repo_name'"; Hub ids and model objects pass untouched."""

import os

import pytest

from trl_entropy import _paths
from trl_entropy._paths import check_model_path, looks_like_path


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working folder holding `runs/` (with `runs/good/`) and a file `weights.bin`; HOME is `tmp_path/home`."""
    (tmp_path / "runs" / "good").mkdir(parents=True)
    (tmp_path / "weights.bin").write_text("x")
    (tmp_path / "home" / "models" / "m").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


@pytest.mark.parametrize("name", ["./nothere", "../nothere-xyz", "/no/such/model", "~/nothere", "a/b/c", "runs/typo",
                                  "runs/good/", "runs/good/missing", ".", ".."])
def test_paths_are_paths(here, name):
    assert looks_like_path(name)


@pytest.mark.parametrize("name", ["gpt2", "Qwen/Qwen2.5-0.5B", "HuggingFaceTB/SmolLM2-135M-Instruct", "testbed"])
def test_hub_ids_are_not_paths(here, name):
    assert not looks_like_path(name)
    assert check_model_path(name) == name


@pytest.mark.parametrize("name", ["./nothere", "../nothere-xyz", "/no/such/model", "a/b/c", "runs/typo",
                                  "runs/good/missing"])
def test_a_missing_folder_is_no_such_folder(here, name):
    with pytest.raises(FileNotFoundError, match=r"^no such folder: " + name.replace(".", r"\.")) as info:
        check_model_path(name)
    assert "Repo id" not in str(info.value) and "Hub id" in str(info.value)


def test_the_message_names_the_flag_the_absolute_folder_and_why_a_hub_shaped_name_is_a_path(here):
    with pytest.raises(FileNotFoundError) as info:
        check_model_path("runs/typo", "--model_name_or_path")
    message = str(info.value)
    assert message.startswith("--model_name_or_path: no such folder: runs/typo (")
    assert os.path.join(str(here), "runs", "typo") in message and "./runs is a folder" in message


def test_home_is_expanded(here):
    assert check_model_path("~/models/m") == str(here / "home" / "models" / "m")
    with pytest.raises(FileNotFoundError, match="no such folder: ~/models/nope"):
        check_model_path("~/models/nope")


def test_existing_folders_objects_and_files(here):
    assert check_model_path("runs/good") == "runs/good"
    assert check_model_path(here / "runs" / "good") == str(here / "runs" / "good")  # os.PathLike
    model = object()
    assert check_model_path(model) is model  # a PreTrainedModel is passed on as it is
    with pytest.raises(NotADirectoryError, match="weights.bin is a file, not a folder"):
        check_model_path("./weights.bin")


def test_a_hub_model_in_the_cache_wins_over_a_same_named_local_folder(here, monkeypatch):
    monkeypatch.setattr(_paths, "_in_hub_cache", lambda repo_id: repo_id == "runs/cached")
    assert check_model_path("runs/cached") == "runs/cached"
    with pytest.raises(FileNotFoundError):
        check_model_path("runs/typo")


def test_transformers_would_have_misled():
    """The reason for this module: transformers reads a missing './folder' as a malformed Hub id."""
    from transformers import AutoConfig

    with pytest.raises(OSError, match="Repo id must"):
        AutoConfig.from_pretrained("./no/such/model-folder")
