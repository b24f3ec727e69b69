"""Every control under DeepSpeed ZeRO-2, ZeRO-3 and FSDP2 on 2 CPU processes (`accelerate launch`, DS_ACCELERATOR=cpu).

Six launches, each trains many controls (starting two processes and importing TRL and DeepSpeed costs more than a
4-step run):

* an FSDP config with ``use_cpu: true``, which accelerate turns into plain multi-CPU data parallelism: the DDP
  reference of the same seed, and the trainer's warning that the requested engine was dropped;
* ZeRO-2, every control of conftest.CONTROL_CONFIGS, 4 steps;
* ZeRO-3 with every parameter partitioned (``stage3_param_persistence_threshold: 0``; DeepSpeed's default keeps a
  tiny model's parameters whole), ``zero3_init_flag: true`` as recipes/accelerate/deepspeed_zero3.yaml: every control,
  4 steps with a checkpoint at step 2, then a second trainer resumed from it;
* ZeRO-3, the uneven cases (tests/ds_worker.py ``uneven``), each under its own watchdog;
* FSDP2, every control and the uneven cases: torch's ``fully_shard`` runs on gloo, but accelerate 1.15 drops FSDP on
  CPU, so the worker puts accelerate's FSDP2 plugin back on the built trainer's state (``ds_worker.force_fsdp2``)
  and accelerate's own prepare shards the model. A test-only step: on a GPU the launch config does it.

Runs where `deepspeed` is installed (CI: a stage of its own in .ci/run, `pip install deepspeed==0.19.8`); skipped
otherwise, unless ``TRL_ENTROPY_REQUIRE_DEEPSPEED=1``, which makes a missing DeepSpeed a failure. Deselect with
``-m "not deepspeed"``. Measured on 2 busy cores: see docs/supported-versions.md, "Tested where".
"""

import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys

import pytest
from conftest import CONTROL_CONFIGS

from trl_entropy.trainers.grpo_entropy_trainer import CONTROL_STATE_FILE

HERE = os.path.dirname(__file__)
REQUIRED = os.environ.get("TRL_ENTROPY_REQUIRE_DEEPSPEED") == "1"
HAVE_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None

if REQUIRED and not HAVE_DEEPSPEED:
    raise ImportError("TRL_ENTROPY_REQUIRE_DEEPSPEED=1 but deepspeed is not installed (pip install deepspeed==0.19.8)")

pytestmark = [
    pytest.mark.deepspeed,
    pytest.mark.multiprocess,
    pytest.mark.slow,
    pytest.mark.skipif(not HAVE_DEEPSPEED, reason="deepspeed is not installed (pip install deepspeed==0.19.8); "
                       "set TRL_ENTROPY_REQUIRE_DEEPSPEED=1 to make this a failure"),
]

NAMES = sorted(CONTROL_CONFIGS)


def _accelerate_config(folder, kind: str) -> str:
    """An accelerate config file for 2 CPU processes: "zero2", "zero3" or "fsdp"."""
    os.makedirs(folder, exist_ok=True)
    lines = ["compute_environment: LOCAL_MACHINE", "machine_rank: 0", "num_machines: 1", "num_processes: 2",
             "rdzv_backend: static", "same_network: true", "use_cpu: true"]
    if kind == "fsdp":  # recipes/accelerate/fsdp.yaml's settings, on CPU
        lines += ["distributed_type: FSDP", "fsdp_config:", "  fsdp_version: 2",
                  "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP", "  fsdp_reshard_after_forward: true",
                  "  fsdp_state_dict_type: SHARDED_STATE_DICT"]
    else:
        stage = int(kind[-1])
        zero = {"stage": stage}
        if stage == 3:
            zero.update(stage3_param_persistence_threshold=0, stage3_gather_16bit_weights_on_model_save=True)
        ds = {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
              "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
              "fp16": {"enabled": "auto"}, "zero_optimization": zero}
        ds_path = os.path.join(folder, f"{kind}.json")
        with open(ds_path, "w") as f:
            json.dump(ds, f)
        lines += ["distributed_type: DEEPSPEED", "deepspeed_config:", f"  deepspeed_config_file: {ds_path}",
                  f"  zero3_init_flag: {'true' if stage == 3 else 'false'}"]
    path = os.path.join(folder, f"{kind}.yaml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(kind, out_dir, worker_args, timeout):
    """`accelerate launch` ds_worker.py on 2 CPU processes; kills the whole process group on a timeout."""
    config = _accelerate_config(os.path.join(out_dir, "config"), kind)
    accelerate = shutil.which("accelerate") or os.path.join(os.path.dirname(sys.executable), "accelerate")
    cmd = [accelerate, "launch", "--config_file", config, "--main_process_port", str(_free_port()),
           os.path.join(HERE, "ds_worker.py"), *worker_args]
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               DS_ACCELERATOR="cpu")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        pytest.fail(f"the {kind} launch {worker_args[0]} did not finish within {timeout} s (a hang?):\n"
                    f"{stderr[-4000:]}")
    assert proc.returncode == 0, stderr[-4000:]
    return out_dir


def _load(folder):
    r0 = json.load(open(os.path.join(folder, "rank0.json")))
    r1 = json.load(open(os.path.join(folder, "rank1.json")))
    assert "error" not in r0 and "error" not in r1, (r0.get("error") or "") + (r1.get("error") or "")
    return r0, r1


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ds_fsdp_on_cpu"))
    return _launch("fsdp", out, ["controls", ",".join(NAMES), out], timeout=90 * len(NAMES))


@pytest.fixture(scope="module")
def zero2_runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ds_zero2"))
    return _launch("zero2", out, ["controls", ",".join(NAMES), out], timeout=90 * len(NAMES))


@pytest.fixture(scope="module")
def zero3_runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ds_zero3"))
    return _launch("zero3", out, ["controls", ",".join(NAMES), out, "--resume"], timeout=150 * len(NAMES))


@pytest.fixture(scope="module")
def fsdp2_runs(tmp_path_factory):
    """FSDP2 on CPU, past accelerate's gate (ds_worker.force_fsdp2): torch's fully_shard on gloo."""
    out = str(tmp_path_factory.mktemp("fsdp2"))
    return _launch("fsdp", out, ["controls", ",".join(NAMES), out, "--force-fsdp2"], timeout=90 * len(NAMES))


@pytest.fixture(scope="module")
def fsdp2_uneven(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("fsdp2_uneven"))
    return _launch("fsdp", out, ["uneven", out, "--force-fsdp2"], timeout=900)


@pytest.fixture(scope="module")
def zero3_uneven(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ds_zero3_uneven"))
    return _launch("zero3", out, ["uneven", out], timeout=900)


def _measured(result):
    return [row["measured"] for row in result["rows"]]


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("name", NAMES)
def test_zero_ranks_agree_and_match_ddp(request, stage, name, ddp_runs):
    runs = request.getfixturevalue(f"zero{stage}_runs")
    r0, r1 = _load(os.path.join(runs, name))
    for r in (r0, r1):
        assert r["engine"]["engine"] == f"DeepSpeed ZeRO-{stage}" and r["world_size"] == 2
        assert r["engine"]["wrapped"] == "DeepSpeedEngine"
        if stage == 3:  # every parameter is a shard on each process, and log(vocabulary) was read from ds_shape
            assert r["engine"]["partitioned"] == r["engine"]["parameters"] > 0
        assert r["engine"]["max_entropy"] == pytest.approx(math.log(14))
        if stage == 3 and CONTROL_CONFIGS[name].get("beta"):  # loaded from a folder: sharded as it was built, so the
            assert r["engine"]["sharded_at_start"]  # bound above was read from ds_shape, not the empty local shard
        assert not r["warnings"]  # the engine asked for is the one running: no "dropped" warning
    assert len(r0["rows"]) == 4
    assert r0["rows"] == r1["rows"]  # knob, controller state, measured entropy, target: identical on both ranks
    assert r0["metrics"] == r1["metrics"]  # every entropy_control/* value at every step
    # the measured entropy is the global sum / count of this run's own tokens, as under DDP
    for row, w0, w1 in zip(r0["rows"], r0["local_windows"], r1["local_windows"]):
        import torch

        total = torch.tensor(w0, dtype=torch.float32) + torch.tensor(w1, dtype=torch.float32)
        assert row["measured"] == pytest.approx(float(total[0]) / float(total[1]), rel=1e-12)
    # Against the DDP run of the same seed (float32: see ds_worker._train): the same completions and the same entropy
    # to float32 rounding at every step (measured 2026-11-29: identical at steps 1-2, within 2e-7 relative at 3-4,
    # where the optimizer's arithmetic runs in another order over the flattened shards).
    d0, _ = _load(os.path.join(ddp_runs, name))
    assert d0["engine"]["engine"] == "MULTI_CPU"
    assert _measured(r0)[0] == pytest.approx(_measured(d0)[0], rel=1e-6)
    assert _measured(r0) == pytest.approx(_measured(d0), rel=1e-5)
    # answer diversity (issue 64): both generation batches' group metrics, identical on both ranks (checked above
    # with every metric) and, for the first batch (the same completions), the DDP run's; the token split every step
    answers = [_answer_metrics(row) for _, row in r0["metrics"] if "entropy_control/distinct_answers" in row]
    assert len(answers) == 2 and answers[0] == [_answer_metrics(row) for _, row in d0["metrics"]
                                                if "entropy_control/distinct_answers" in row][0]
    assert all("entropy_control/measured_solved" in row or "entropy_control/measured_unsolved" in row
               for _, row in r0["metrics"] if "entropy_control/measured" in row)


def _answer_metrics(row: dict) -> dict:
    return {k: v for k, v in row.items() if "answer" in k or k.endswith("/solved_groups")}


@pytest.mark.parametrize("name", NAMES)
def test_fsdp2_ranks_agree_and_match_ddp(fsdp2_runs, ddp_runs, name):
    """FSDP2 (torch's fully_shard on gloo; accelerate's FSDP plugin put back on the state, see ds_worker.force_fsdp2):
    every parameter a DTensor shard, identical decisions on both ranks, the DDP run's entropy."""
    r0, r1 = _load(os.path.join(fsdp2_runs, name))
    for r in (r0, r1):
        assert r["engine"]["wrapped"].startswith("FSDP") and r["world_size"] == 2
        assert r["engine"]["partitioned"] == r["engine"]["parameters"] > 0
        assert r["engine"]["max_entropy"] == pytest.approx(math.log(14))
    assert len(r0["rows"]) == 4 and r0["rows"] == r1["rows"] and r0["metrics"] == r1["metrics"]
    d0, _ = _load(os.path.join(ddp_runs, name))
    assert _measured(r0) == pytest.approx(_measured(d0), rel=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_zero3_resume_is_exact(zero3_runs, name):
    """4 steps straight vs the same run resumed from its ZeRO-3 checkpoint at step 2: the same entropy_control/*
    values at steps 3-4, the same controller state, target and knob at the end; the model card written by the main
    process only."""
    r0, r1 = _load(os.path.join(zero3_runs, name))
    for r in (r0, r1):
        straight, resumed = r["metrics"], r["resumed"]["metrics"]
        assert [s for s, _ in resumed][-2:] == [3, 4]
        assert resumed[-2:] == straight[-2:], name
        assert r["resumed"]["state"] == r["state"]
        assert r["resumed"]["target"] == r["rows"][-1]["target"]
        assert r["resumed"]["epsilon_high"] == r["rows"][-1]["epsilon_high"]
    assert r0["cards"] > 0 and r1["cards"] == 0  # rendered on the main process only, at each save
    ckpt = os.path.join(zero3_runs, name, "run", "checkpoint-2")
    assert os.path.exists(os.path.join(ckpt, CONTROL_STATE_FILE))
    assert os.path.exists(os.path.join(zero3_runs, name, "run", "README.md"))


def test_ddp_reference_warns_that_fsdp_was_dropped(ddp_runs):
    """accelerate 1.15 runs an FSDP config with use_cpu: true as plain multi-CPU data parallelism: the trainer says so
    at start, on every rank."""
    r0, r1 = _load(os.path.join(ddp_runs, NAMES[0]))
    for r in (r0, r1):
        assert r["engine"]["engine"] == "MULTI_CPU"
        assert any("asked for FSDP" in w and "plain data parallel" in w for w in r["warnings"]), r["warnings"]


UNEVEN = pytest.mark.parametrize("uneven", ["zero3_uneven", "fsdp2_uneven"])


@UNEVEN
def test_uneven_all_rollouts_of_one_rank_rejected(request, uneven):
    r0, r1 = _load(os.path.join(request.getfixturevalue(uneven), "all_rejected"))
    assert r0["metrics"] == r1["metrics"] and r0["rows"] == r1["rows"]
    # rank 1's advantages are all zero (constant reward); hard mode above the band keeps only A > 0: none there
    assert r1["local_kept"] and all(kept == 0 for kept, _ in r1["local_kept"])
    assert any(kept > 0 for kept, _ in r0["local_kept"])
    assert len(r0["rows"]) == 2


@UNEVEN
def test_uneven_zero_std_groups_on_one_rank(request, uneven):
    r0, r1 = _load(os.path.join(request.getfixturevalue(uneven), "zero_std"))
    assert set(r0) == set(r1)
    for name in r0:
        assert len(r0[name]["rows"]) == 2, name
        assert r0[name]["rows"] == r1[name]["rows"] and r0[name]["metrics"] == r1[name]["metrics"], name


@UNEVEN
def test_uneven_pass_at_k_problem_counts(request, uneven):
    """pass@k with 3 vs 2 and 1 vs 0 problems per rank; under ZeRO-3 with the weights gathered for generation (TRL's
    default) or not. Every forward pass takes part in collectives: the ranks run the same number of generate calls."""
    r0, r1 = _load(os.path.join(request.getfixturevalue(uneven), "pass_at_k"))
    for key, e0 in r0.items():
        e1 = r1[key]
        assert e0["evals"] == e1["evals"] and len(e0["evals"]) == 2, key
        expected = 0.4 if "problems=5" in key else 1.0  # problems 0 and 1 are correct whatever is sampled
        for e in e0["evals"]:
            assert e["eval/pass@1"] == pytest.approx(expected) and e["eval/mean@4"] == pytest.approx(expected)
        assert e0["engine"]["partitioned"] == e0["engine"]["parameters"]
        assert e0["cards"] > 0 and e1["cards"] == 0, key  # the card: main process only
        assert "README.md" in e0["files"]
    with_plots = "gather=True,problems=5"  # entropy_plots=True: the pictures written, by the main process only
    assert any(f.endswith(".png") for f in r0[with_plots]["files"]), r0[with_plots]["files"]
    assert r0[with_plots]["pictures"] > 0 and r1[with_plots]["pictures"] == 0


def test_the_gpu_script_runs_its_own_zero3_launch_on_cpu(capsys):
    """benchmarks/gpu_engines.py up to where CUDA is needed: its ZeRO-3 config, `accelerate launch` of its worker on
    2 CPU processes, the table row (the GPU runs themselves need a GPU)."""
    root = os.path.dirname(HERE)
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks import gpu_engines

    assert gpu_engines.main(["--cpu-smoke", "--launch"]) == 0
    assert "| entropy_bonus | zero3 | 2 | DeepSpeed ZeRO-3 | ok |" in capsys.readouterr().out
