"""The benchmark scripts run end to end (a few steps on the tiny testbed) and their run cache resumes.

They are measurement tools, not timed tests: this only checks that they work as documented.
"""

import json
import math
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # `benchmarks` is a package at the repository root (`python -m pytest` puts it there)
    sys.path.insert(0, ROOT)

from benchmarks import _runs, knob_authority, tracking  # noqa: E402


def test_knob_authority_caches_runs_and_reprints(tmp_path, capsys):
    results = tmp_path / "knob.jsonl"
    argv = ["--testbed", "tiny", "--steps", "4", "--runs", "plain GRPO", "positives only (Entrocraft above its band)",
            "--results", str(results)]
    knob_authority.main(argv)
    first = capsys.readouterr().out
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["label"] for r in rows] == ["plain GRPO", "positives only (Entrocraft above its band)"]
    assert all(len(r["measured"]) == 4 for r in rows)
    knob_authority.main(argv)  # everything cached: no new run, the same table
    again = capsys.readouterr().out
    assert len(results.read_text().splitlines()) == 2
    assert first.split("\n\n")[-1] == again.split("\n\n")[-1]
    assert "| plain GRPO |" in again


def test_tracking_reports_the_smoothed_error(tmp_path, capsys):
    results = tmp_path / "tracking.jsonl"
    tracking.main(["--testbed", "tiny", "--steps", "4", "--targets", "constant", "--methods", "grpo", "entrocraft",
                   "--h0", "0.8", "--results", str(results)])
    out = capsys.readouterr().out
    assert "| constant | entrocraft |" in out and "| constant | grpo |" in out
    assert len(results.read_text().splitlines()) == 2


def test_smoothed_error_is_taken_on_moving_averages_after_the_first_fifth():
    measured = [2.0, 0.0] * 10  # oscillates around 1.0: raw error 100%, smoothed error small
    target = [1.0] * 20
    assert tracking.smoothed_error(measured, target) < 0.12
    err, raw, settle = tracking.summarize(measured, target)
    assert raw == 1.0 and settle is None and err < 0.12
    assert tracking.smoothed_error([1.0] * 20, target) == 0.0


def test_plain_grpo_runs_once_and_is_scored_against_each_target(tmp_path, capsys):
    results = tmp_path / "tracking.jsonl"
    tracking.main(["--testbed", "tiny", "--steps", "4", "--targets", "constant", "linear", "--methods", "grpo",
                   "--h0", "0.8", "--results", str(results)])
    out = capsys.readouterr().out
    assert len(results.read_text().splitlines()) == 1  # the target does not change plain GRPO's run
    assert "| constant | grpo |" in out and "| linear | grpo |" in out
    # the target curve is the schedule evaluated as the trainer does: step s (1-based) sees schedule(s - 1, total)
    assert tracking.target_curve("constant", 0.48, 1.0, [1, 2, 3, 4], 4) == [0.48] * 4
    linear = tracking.target_curve("linear", 0.8, 0.5, [1, 2, 3, 4], 4)
    assert linear[0] == 0.8 and abs(linear[-1] - 0.4) < 1e-9


def test_a_cached_run_is_not_served_once_the_package_defaults_change(tmp_path, capsys, monkeypatch):
    from benchmarks import _runs

    results = tmp_path / "tracking.jsonl"
    argv = ["--testbed", "tiny", "--steps", "3", "--targets", "constant", "--methods", "entropy_bonus", "--h0", "0.8",
            "--results", str(results)]
    tracking.main(argv)
    row = json.loads(results.read_text().splitlines()[0])
    assert row["package_defaults"] == _runs.package_defaults()
    assert row["package_defaults"]["entropy_bonus_kp"] > 0
    capsys.readouterr()
    # a default changes (as when a controller's gains are retuned): the cached run no longer answers for it
    changed = dict(_runs.package_defaults(), entropy_bonus_kp=123.0)
    monkeypatch.setattr(_runs, "package_defaults", lambda: changed)
    tracking.main([*argv, "--cached_only"])
    out = capsys.readouterr().out
    assert "ran with other package defaults, not served: entropy_bonus_kp" in out
    assert "| constant | entropy_bonus |" not in out
    # reprinted as recorded on request, naming what changed; never with training allowed
    tracking.main([*argv, "--cached_only", "--as_recorded"])
    out = capsys.readouterr().out
    assert "served as recorded: entropy_bonus_kp" in out and "| constant | entropy_bonus |" in out
    with pytest.raises(SystemExit):
        tracking.main([*argv, "--as_recorded"])
    assert "needs --cached_only" in capsys.readouterr().err
    # a row cached before the record existed is served as it is
    legacy = {k: v for k, v in row.items() if k != "package_defaults"}
    results.write_text(json.dumps(legacy) + "\n")
    tracking.main([*argv, "--cached_only"])
    assert "| constant | entropy_bonus |" in capsys.readouterr().out


def test_reward_analysis_recovers_known_effects_with_one_intercept_per_seed(tmp_path, capsys):
    import random

    from benchmarks.archive import reward_analysis

    rng, lines = random.Random(0), []
    for seed in (0, 1, 2):
        for i in range(8):
            early, late, coef = rng.uniform(0.5, 1.0), rng.uniform(0.8, 1.2), rng.uniform(0.05, 0.4)
            # a known law: -0.2 per nat of early entropy, -0.1 per unit of |c|, a different level per seed
            level = 0.9 + 0.05 * seed - 0.2 * early - 0.1 * coef
            measured = [early] * 40 + [late] * 60
            label = "hold/trl_adaptive_entropy" if i == 0 else f"hold/entropy_bonus V{i}"
            lines.append(json.dumps({"label": label, "seed": seed, "knob_name": "entropy_coef", "measured": measured,
                                     "reward": [level] * 100, "knob": [coef] * 100, "final_reward": level}))
    path = tmp_path / "tracking.jsonl"
    path.write_text("\n".join(lines) + "\n")
    obs = reward_analysis.observations(str(path), "hold")
    assert len(obs) == 24
    beta, r2 = reward_analysis.fit(obs, "final reward")
    assert abs(beta[0] + 0.2) < 1e-6 and abs(beta[1]) < 1e-6 and abs(beta[2] + 0.1) < 1e-6 and r2 > 0.999
    reward_analysis.main(["--results", str(path)])
    out = capsys.readouterr().out
    assert "| final reward | -0.200 | " in out and " | -0.100 | 1.00 |" in out and "\n| 2 | 0." in out


def test_a_default_the_run_set_itself_does_not_count_as_changed():
    from benchmarks import _runs

    # recorded after the law cut (the bonus's removed variants are gone, not yet to come)
    row = {"package_defaults": {"entropy_bonus_kp": 0.25, "entropy_bonus_min": -0.5, "_after_tags": ["pre-law-cut"]}}
    now = {"entropy_bonus_kp": 0.25, "entropy_bonus_min": -0.1}
    assert _runs.changed_defaults(row, now) == {"entropy_bonus_min": (-0.5, -0.1)}
    assert _runs.changed_defaults(row, now, overridden={"entropy_bonus_min"}) == {}
    assert _runs.changed_defaults({}, now) == {}  # cached before defaults were recorded
    # a field added after the run, at the value the run trained as, is no change; at another value it is
    assert _runs.changed_defaults(row, dict(now, entropy_measurement="step"), overridden={"entropy_bonus_min"}) == {}
    assert _runs.changed_defaults(row, dict(now, entropy_measurement="generation_batch"),
                                  overridden={"entropy_bonus_min"}) == {"entropy_measurement": ("step",
                                                                                                  "generation_batch")}


def test_a_bonus_default_does_not_touch_a_run_without_the_bonus_controller():
    from benchmarks import _runs

    def row(overrides):
        key = json.dumps(["smollm2", "hold/x", 0, 100, [[True, overrides, "d"], "x", 1.0, "constant", 1.0, 0.3, {}]])
        return {"key": key, "package_defaults": {"entropy_bonus_min": -0.5, "adaptive_clip_delta": 0.01,
                                                 "_after_tags": ["pre-law-cut"]}}

    now = {"entropy_bonus_min": -0.1, "adaptive_clip_delta": 0.01}
    assert _runs.changed_defaults(row({"entropy_control": "trl_adaptive"}), now) == {}
    assert _runs.changed_defaults(row({"entropy_control": "entropy_bonus"}), now) == {"entropy_bonus_min": (-0.5, -0.1)}
    assisted = row({"entropy_control": "entrocraft", "entropy_bonus_assist": True})
    assert _runs.changed_defaults(assisted, now) == {"entropy_bonus_min": (-0.5, -0.1)}
    # other fields still count for every run
    assert _runs.changed_defaults(row({}), dict(now, adaptive_clip_delta=0.02)) == {"adaptive_clip_delta": (0.01, 0.02)}


def test_final_eval_evaluates_the_trained_policy_under_its_own_cache_key(tmp_path, capsys):
    results = tmp_path / "tracking.jsonl"
    argv = ["--testbed", "tiny", "--steps", "4", "--targets", "constant", "--methods", "entropy_bonus", "--h0", "0.8",
            "--results", str(results)]
    tracking.main(argv)
    tracking.main([*argv, "--final_eval"])
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    runs = [r for r in rows if r["label"] != "start/eval"]
    assert len(runs) == 2 and len({r["key"] for r in runs}) == 2  # the evaluated run did not reuse the plain one
    assert "final_eval" not in runs[0] and set(runs[1]["final_eval"]) >= {"train_sampled", "test_greedy", "n_test"}
    assert runs[1]["measured"] == runs[0]["measured"]  # the same training, evaluated afterwards
    assert all(0.0 <= runs[1]["final_eval"][k] <= 1.0 for k in tracking.EVAL_COLUMNS)
    start = [r for r in rows if r["label"] == "start/eval"]
    assert len(start) == 1
    assert "| – | starting model |" in out and "| constant | entropy_bonus | " in out.split("Trained policies")[1]
    tracking.main([*argv, "--final_eval", "--cached_only"])  # reprinted from the cache, nothing trained
    assert len(results.read_text().splitlines()) == 3


def test_second_half_reward_averages_the_logged_rewards_after_the_middle_step():
    run = {"step": [1, 2, 3, 4, 5, 6], "reward": [0.0, None, None, 1.0, None, 0.5]}
    assert _runs.second_half_reward(run) == 0.75
    assert _runs.second_half_reward({"step": [], "reward": []}) is None


def test_gradient_scale_masks_each_completion_after_its_first_end_token():
    import torch

    from benchmarks.gradient_scale import completion_mask

    ids = torch.tensor([[5, 2, 7, 7], [5, 6, 8, 2], [2, 2, 5, 5]])
    assert completion_mask(ids, {2}).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]


def test_the_testbed_device_switch_changes_use_cpu_and_thus_the_cache_key(monkeypatch):
    from trl_entropy.testbeds import addition

    monkeypatch.delenv(addition.DEVICE_ENV, raising=False)
    assert addition.grpo_config_kwargs()["use_cpu"] is True
    monkeypatch.setenv(addition.DEVICE_ENV, "cuda")
    assert addition.grpo_config_kwargs()["use_cpu"] is False  # part of the key: a GPU run never serves a CPU one
    monkeypatch.setenv(addition.DEVICE_ENV, "gpu")
    with pytest.raises(ValueError, match="TRL_ENTROPY_TESTBED_DEVICE must be 'cpu' or 'cuda'"):
        addition.grpo_config_kwargs()


def test_parallel_tracking_runs_each_job_into_its_own_cache_and_merges_them(tmp_path, capsys):
    from benchmarks import parallel_tracking

    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps([["--seeds", "0"], ["--seeds", "0"]]))  # the second repeats the first
    merged = tmp_path / "merged.jsonl"
    parallel_tracking.main(["--jobs", str(jobs), "--parallel", "2", "--merged", str(merged), "--workdir",
                            str(tmp_path / "work"), "--", "--testbed", "tiny", "--steps", "2", "--targets", "constant",
                            "--methods", "entropy_bonus", "--h0", "0.8", "--final_eval"])
    rows = [json.loads(line) for line in merged.read_text().splitlines()]
    assert [r["label"] for r in rows].count("start/eval") == 1  # evaluated once, before the jobs
    runs = [r for r in rows if r["label"] != "start/eval"]
    assert [r["seed"] for r in runs] == [0]  # one row per key, though both jobs trained it
    out = capsys.readouterr().out
    assert out.count("exit 0") == 2 and "2 rows" in out
    assert sorted(os.listdir(tmp_path / "work" / "job000")) == sorted(os.listdir(tmp_path / "work" / "job001"))
    tracking.main(["--testbed", "tiny", "--steps", "2", "--targets", "constant", "--methods", "entropy_bonus",
                   "--h0", "0.8", "--final_eval", "--seeds", "0", "--results", str(merged), "--cached_only"])
    assert "| constant | entropy_bonus | " in capsys.readouterr().out


def test_merge_skips_a_half_written_row(tmp_path):
    from benchmarks import parallel_tracking

    (tmp_path / "a.jsonl").write_text('{"key": "k1", "x": 1}\n{"key": "k2"')
    (tmp_path / "b.jsonl").write_text('{"key": "k1", "x": 2}\n')
    assert parallel_tracking.merge(str(tmp_path), str(tmp_path / "m.jsonl")) == 1
    assert json.loads((tmp_path / "m.jsonl").read_text())["x"] == 1


def test_plot_tracking_draws_the_mean_over_seeds(tmp_path):
    from benchmarks import plot_tracking

    out = tmp_path / "mean.png"
    plot_tracking.main(["--results", os.path.join(ROOT, "benchmarks", "results", "tracking_smollm2_gpu.jsonl.gz"),
                        "--seeds", "0,1,2", "--methods", "trl_adaptive_entropy", "entropy_bonus", "--out", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_gpu_run_asked_for_without_a_gpu_is_refused_not_trained_on_the_cpu(tmp_path, monkeypatch):
    import torch

    from trl_entropy.testbeds.addition import DEVICE_ENV

    monkeypatch.setenv(DEVICE_ENV, "cpu")  # tracking.main sets it from --device: restored after the test
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    results = tmp_path / "gpu.jsonl"
    argv = ["--testbed", "smollm2", "--steps", "2", "--h0", "0.954", "--device", "cuda", "--targets", "hold",
            "--methods", "entropy_bonus", "--results", str(results)]
    with pytest.raises(RuntimeError, match="no CUDA device is available"):
        tracking.main(argv)
    with pytest.raises(RuntimeError, match="no CUDA device is available"):
        tracking.main([*argv, "--final_eval", "--prepare_only"])
    assert not results.exists()  # nothing cached under a GPU key
    tracking.main([*argv, "--cached_only"])  # reading cached GPU rows needs no GPU


def test_parallel_tracking_says_which_jobs_failed_and_exits_non_zero(tmp_path, capsys):
    from benchmarks import parallel_tracking

    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps([["--methods", "entropy_bonsu"]]))
    with pytest.raises(SystemExit) as e:
        parallel_tracking.main(["--jobs", str(jobs), "--merged", str(tmp_path / "m.jsonl"), "--workdir",
                                str(tmp_path / "w"), "--", "--testbed", "tiny", "--steps", "2", "--h0", "0.8"])
    assert e.value.code == 1
    out = capsys.readouterr().out
    assert "invalid choice: 'entropy_bonsu'" in out and "1 of 1 jobs failed: [0]" in out
    jobs.write_text('[["--seeds" "0"]]')
    with pytest.raises(SystemExit) as e:
        parallel_tracking.main(["--jobs", str(jobs), "--merged", str(tmp_path / "m.jsonl")])
    assert e.value.code == 2 and "--jobs" in capsys.readouterr().err


def test_a_removed_field_counts_only_at_a_value_other_than_how_the_package_trains_now(monkeypatch):
    from benchmarks import _runs

    # entropy_bonus_antiwindup was such a field from 2026-11-26 until it came back on 2026-11-28
    monkeypatch.setattr(_runs, "FIELDS_REMOVED", {"entropy_bonus_old_option": "conditional"})
    now = {"entropy_bonus_min": -0.1}
    kept = {"package_defaults": {"entropy_bonus_min": -0.1, "entropy_bonus_old_option": "conditional"}}
    dropped = {"package_defaults": {"entropy_bonus_min": -0.1, "entropy_bonus_old_option": "clamp"}}
    assert _runs.changed_defaults(kept, now) == {}
    assert _runs.changed_defaults(dropped, now) == {"entropy_bonus_old_option": ("clamp", None)}
    # while the field exists, a different value still counts as a change
    assert _runs.changed_defaults(kept, dict(now, entropy_bonus_old_option="clamp")) != {}


def test_runs_recorded_before_the_law_cut_are_served_at_the_values_the_law_keeps():
    """The bonus's variants removed after the tag ``pre-law-cut``: a run that recorded such a field at the value the
    law keeps, or that predates a field whose first value was that one, trains as the package trains now; a run at
    another value (recorded, or the field's first value, as the prediction's integral) does not."""
    from benchmarks import _runs

    now = {"entropy_bonus_min": -0.1}
    for recorded in ({"entropy_bonus_min": -0.1, "entropy_bonus_antiwindup": "conditional",
                      "entropy_bonus_integral_error": "level", "entropy_bonus_target_lookahead": "horizon",
                      "entropy_bonus_pull_gain": 0.0, "entropy_bonus_integral_clip": 1.0},
                     {"entropy_bonus_min": -0.1, "entropy_bonus_integral_error": "level",
                      "entropy_bonus_target_lookahead": "horizon"}):
        assert _runs.changed_defaults({"package_defaults": recorded}, now) == {}
    upper = {"package_defaults": {"entropy_bonus_min": -0.1, "entropy_bonus_integral_error": "level",
                                  "entropy_bonus_target_lookahead": "horizon", "entropy_bonus_antiwindup": "upper"}}
    assert _runs.changed_defaults(upper, now) == {"entropy_bonus_antiwindup": ("upper", None)}
    older = {"package_defaults": {"entropy_bonus_min": -0.1, "entropy_bonus_target_lookahead": "horizon"}}
    assert _runs.changed_defaults(older, now) == {"entropy_bonus_integral_error": ("prediction", None)}


def test_a_moving_target_default_does_not_touch_a_run_on_a_constant_target():
    from benchmarks import _runs

    # recorded before entropy_bonus_target_lookahead existed ("step"), with the level's integral; the field is gone
    recorded = {"entropy_bonus_min": -0.1, "entropy_bonus_integral_error": "level"}
    now = {"entropy_bonus_min": -0.1}
    flat = {"package_defaults": recorded, "target": [0.9] * 5}
    annealed = {"package_defaults": recorded, "target": [0.9, 0.9, 0.8, 0.7]}
    assert _runs.changed_defaults(flat, now) == {}
    assert _runs.changed_defaults(annealed, now) == {"entropy_bonus_target_lookahead": ("step", None)}
    assert _runs.changed_defaults({"package_defaults": recorded}, now) != {}  # no logged target: it counts


def test_frontier_scores_each_label_on_every_asked_seed_and_pairs_it_with_trl(tmp_path, capsys):
    from benchmarks.archive import frontier

    def run(label, seed, level, sampled):
        measured = [1.0] * 20 + [level] * 80  # the error counts after the first 20 steps, on MA10
        return {"label": label, "seed": seed, "measured": measured, "target": [1.0] * 100, "final_reward": 0.5,
                "final_eval": {"train_sampled": sampled, "train_greedy": sampled + 0.1}}

    rows = [run("hold/trl_adaptive_entropy", s, 1.2, 0.80 + 0.01 * s) for s in (0, 1)]
    rows += [run("hold/entropy_bonus", s, 1.1, 0.82 + 0.03 * s) for s in (0, 1)]
    rows += [run("hold/entropy_bonus X", 0, 0.95, 0.9)]  # one seed only: not a row
    rows += [dict(run("hold/entropy_bonus", 2, 1.0, 0.5), final_eval=None)]  # no evaluation: ignored
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = frontier.table(str(path), [0, 1])
    assert [r["label"] for r in table] == ["hold/entropy_bonus", "hold/trl_adaptive_entropy"]  # by error
    bonus, trl = table
    assert bonus["err"] == pytest.approx(tracking.smoothed_error([1.0] * 20 + [1.1] * 80, [1.0] * 100))
    assert trl["vs_trl"] is None
    assert bonus["vs_trl"][0] == pytest.approx(0.03) and bonus["vs_trl"][1] == pytest.approx(0.01)
    frontier.main(["--results", str(path), "--seeds", "0,1", "--png", str(tmp_path / "f.png"), "--goal", "hold=10"])
    out = capsys.readouterr().out
    assert "| hold | `entropy_bonus` | " in out and "+0.030 ± 0.010" in out and (tmp_path / "f.png").stat().st_size > 0


def test_two_sided_authority_recovers_the_slope_on_the_two_sided_share():
    """Entropy that moves, per generation batch, by 0.5 x the batch's two-sided share (plus a level pull) gives a
    slope of 0.5; a run without the share logged gives nothing."""
    import random

    rng = random.Random(0)
    runs = []
    for _ in range(3):
        log_h, measured, shares = 0.0, [], []
        for _batch in range(25):
            share = rng.uniform(0.0, 0.6)
            measured += [math.exp(log_h)] * 4
            shares += [1.0 - share, None, None, None]
            log_h += 0.5 * share - 0.1 * log_h - 0.15 + rng.gauss(0, 0.01)
        runs.append({"measured": measured, "frac_reward_zero_std": shares})
    slope, se, n = knob_authority.two_sided_authority(runs)
    assert abs(slope - 0.5) < 3 * se + 0.05 and se < 0.1 and n == 3 * 23
    assert knob_authority.two_sided_authority([{"measured": [1.0] * 100}]) is None


def test_late_policy_evaluates_mid_run_without_changing_the_run(tmp_path, capsys):
    from benchmarks.archive import late_policy

    tracking_results = tmp_path / "tracking.jsonl"
    tracking.main(["--testbed", "tiny", "--steps", "6", "--targets", "constant", "--methods", "entropy_bonus",
                   "--h0", "0.8", "--results", str(tracking_results), "--final_eval"])
    results = tmp_path / "late.jsonl"
    argv = ["--testbed", "tiny", "--steps", "6", "--targets", "constant", "--h0", "0.8", "--eval_at", "3,6",
            "--results", str(results), "--tracking_results", str(tracking_results), "--output_dir", str(tmp_path)]
    late_policy.main(argv)
    out = capsys.readouterr().out
    run = json.loads(results.read_text().splitlines()[0])
    tracked = [r for r in map(json.loads, tracking_results.read_text().splitlines()) if "final_eval" in r
               and r["label"] != "start/eval"][0]
    assert run["measured"] == tracked["measured"]  # evaluating mid-run leaves the training as it was
    assert sorted(run["step_evals"], key=int) == ["3", "6"]
    assert run["step_evals"]["6"] == tracked["final_eval"]  # the last step's evaluation is --final_eval's
    assert "largest difference 0.0e+00" in out and "step   3: train sampled" in out
    late_policy.main(argv)  # served from the cache: nothing trained, nothing appended
    assert len(results.read_text().splitlines()) == 1


def test_paired_pairs_by_seed_takes_the_first_label_per_seed_and_pools_the_groups(tmp_path, capsys):
    from benchmarks import paired

    def run(label, seed, level, sampled):
        return {"key": f"{label}/{seed}", "label": label, "seed": seed, "measured": [1.0] * 20 + [level] * 80,
                "target": [1.0] * 100,
                "final_reward": sampled, "reward": [sampled] * 4,
                "final_eval": {"train_sampled": sampled, "train_greedy": sampled, "test_sampled": sampled,
                               "test_greedy": sampled}}

    first = [run("hold/new", 0, 1.05, 0.8), run("hold/new", 1, 1.05, 0.9), run("hold/new", 2, 1.0, 0.9),
             run("hold/old", 0, 1.1, 0.7), run("hold/old", 1, 1.1, 0.7),
             run("hold/old again", 1, 1.2, 0.5)]  # seed 1 of the law before under its new label: it wins
    second = [run("hold/new", 5, 1.0, 0.6), run("hold/old again", 5, 1.1, 0.7)]
    paths = []
    for i, rows in enumerate((first, second)):
        paths.append(tmp_path / f"r{i}.jsonl")
        paths[-1].write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert paired.parse_seeds("0-2,5") == [0, 1, 2, 5]
    groups = paired.main(["--a", "hold/new", "--b", "hold/old again", "hold/old",
                          "--group", "one", str(paths[0]), "0-2", "--group", "two", str(paths[1]), "5"])
    (_, one), (_, two), (name, pooled) = groups
    assert one["seed"] == [0, 1] and two["seed"] == [5] and name == "pooled"  # seed 2 has no law before
    assert one["train_sampled"] == pytest.approx([0.1, 0.4]) and two["train_sampled"] == pytest.approx([-0.1])
    assert pooled["seed"] == [0, 1, 5] and pooled["err"][0] < 0  # closer on seed 0
    out = capsys.readouterr().out
    assert "| one | 2 | 2 of 2 |" in out and "| pooled | 3 |" in out and "+0.133 ± 0.145" in out
    with pytest.raises(SystemExit):  # a misspelt label: an error naming the labels there are, not an empty row
        paired.main(["--a", "hold/new", "--b", "hold/olld", "--group", "one", str(paths[0]), "0-2"])
    assert "hold/old again" in capsys.readouterr().err
    # "label@seeds": a label used on those seeds only (seed 1 from "hold/old again", seed 0 skips it to "hold/old")
    assert paired.label_seeds("hold/x YKS@1,7") == ("hold/x YKS", [1, 7])
    assert paired.label_seeds("hold/x@home") == ("hold/x@home", None)
    (_, one), = paired.main(["--a", "hold/new", "--b", "hold/old again@1", "hold/old",
                             "--group", "one", str(paths[0]), "0-2"])
    assert one["b:train_sampled"] == pytest.approx([0.7, 0.5])
    (_, one), = paired.main(["--a", "hold/new", "--b", "hold/old again@5", "hold/old",
                             "--group", "one", str(paths[0]), "0-2"])
    assert one["b:train_sampled"] == pytest.approx([0.7, 0.7])
    # runs cached without a final evaluation count only with --without_eval, with empty accuracy columns
    bare = dict(run("hold/new", 2, 1.0, 0.9), final_eval=None, key="bare")
    (tmp_path / "r2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [bare, run("hold/old", 2, 1.1, 0.7)]))
    with pytest.raises(SystemExit):
        paired.main(["--a", "hold/new", "--b", "hold/old", "--group", "one", str(tmp_path / "r2.jsonl"), "2"])
    capsys.readouterr()
    (_, one), = paired.main(["--a", "hold/new", "--b", "hold/old", "--without_eval",
                             "--group", "one", str(tmp_path / "r2.jsonl"), "2"])
    assert one["seed"] == [2] and one["err"][0] < 0 and math.isnan(one["train_sampled"][0])
    assert "| one | 1 | 1 of 1 |" in capsys.readouterr().out


def test_error_budget_splits_the_metric_by_phase_and_finds_the_noise_floor(tmp_path, capsys):
    import random

    from benchmarks import error_budget

    target = [1.0] * 100
    dip_then_excess = [1.0] * 20 + [0.8] * 20 + [1.1] * 60  # a dip, then a standing excess
    budget = error_budget.phase_budget(dip_then_excess, target, [20, 40, 70, 100])
    assert sum(share for share, _, _ in budget) == pytest.approx(tracking.smoothed_error(dip_then_excess, target))
    assert budget[2][1] == pytest.approx(0.1) and budget[2][2] == pytest.approx(0.1)  # all excess: offset = error
    assert budget[0][2] < 0  # the dip's offset is below the target
    rng = random.Random(0)
    noisy = [1.0 + 0.2 * rng.gauss(0, 1) for _ in range(2000)]
    assert error_budget.white_noise_sigma(noisy, [1.0] * 2000) == pytest.approx(0.2, rel=0.1)
    assert error_budget.noise_floor(0.0, target) == 0.0
    floor = error_budget.noise_floor(0.2, target)  # MA10 of white noise: ~0.8 * 0.2 / sqrt(10)
    assert floor == pytest.approx(0.8 * 0.2 / math.sqrt(10), rel=0.15)
    rows = [{"key": f"k{s}", "label": "hold/x", "seed": s, "measured": dip_then_excess, "target": target,
             "final_eval": {"train_sampled": 0.5}} for s in (0, 1)]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    error_budget.main(["--results", str(path), "--label", "hold/x", "--seeds", "0-1"])
    out = capsys.readouterr().out
    assert "2 seeds" in out and "| mean |" in out
    with pytest.raises(SystemExit, match="no cached run"):
        error_budget.main(["--results", str(path), "--label", "hold/y", "--seeds", "0-1"])


def test_error_budget_finds_the_steps_where_the_law_sits_at_its_lower_bound(tmp_path, capsys):
    from benchmarks import error_budget

    target = [1.0] * 10
    measured = [1.0] * 5 + [1.5, 1.5, 1.02, 1.02, 1.02]
    law = [0.1] * 5 + [-0.1, -0.1, 0.05, 0.05, 0.05]
    integral = [0.1] * 7 + [0.099, 0.098, 0.097]  # frozen at the bound, falling after it
    row = {"measured": measured, "target": target, error_budget.LAW: law, error_budget.INTEGRAL: integral}
    share, at, other, step_at, step_other = error_budget.lower_bound_steps(row, low=-0.1, start=5)
    assert share == pytest.approx(0.4)
    assert at == pytest.approx(0.5) and other == pytest.approx(0.02)
    assert step_at == 0.0 and step_other == pytest.approx(-0.001)
    assert error_budget.lower_bound_steps({"measured": measured, "target": target}) is None
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"key": "k", "label": "hold/x", "seed": 0, "final_eval": {"train_sampled": 0.5},
                                **row}) + "\n")
    error_budget.main(["--results", str(path), "--label", "hold/x", "--seeds", "0", "--from_step", "5",
                       "--phases", "0,5,10"])
    out = capsys.readouterr().out
    assert "The integral at the lower bound (-0.1)" in out and "| 0 | 40.0% | +50.0 | +2.0 |" in out


def _level_run(method, seed, p1, p16, p64, steps=1000):
    return {"method": method, "seed": seed, "steps": steps, "testbed": "tiny_headroom", "tracking_error": 0.05,
            "final": {"all": {"pass_at_k": {"1": p1, "16": p16, "64": p64}}}}


def _noise(method, seed):  # a different small error per run, so the paired SEs are not zero
    return 0.01 * math.sin(7 * seed + 3 * len(method))


def test_constant_levels_find_an_interior_optimum_only_when_the_middle_beats_both_sides():
    from benchmarks.payoff import level_verdicts, levels_report

    def runs(table):
        return [_level_run(m, s, *(p + _noise(m, s) for p in ps)) for s in range(5) for m, *ps in table]

    # pass@1 peaks at the quarter level, pass@16 and pass@64 at the half level: A holds (at 16, 64), B holds
    v = level_verdicts(runs([("bonus_hold_quarter", 0.70, 0.85, 0.90), ("bonus_hold_half", 0.60, 0.93, 0.97),
                             ("bonus_hold", 0.45, 0.88, 0.93)]))
    assert v["best"] == {"1": "bonus_hold_quarter", "16": "bonus_hold_half", "64": "bonus_hold_half"}
    assert v["claim_a"] == "holds" and not v["interior"]["1"][2] and v["interior"]["16"][2]
    assert v["claim_b"] == "holds" and not v["futile"] and v["complete"]
    # the same, but the middle level's edge at 16 and 64 is within the noise: neither claim is shown
    v = level_verdicts(runs([("bonus_hold_quarter", 0.70, 0.929, 0.969), ("bonus_hold_half", 0.60, 0.93, 0.97),
                             ("bonus_hold", 0.45, 0.88, 0.93)]))
    assert v["claim_a"] == "not shown between 0.25x and 1x" and v["claim_b"] == "not shown"
    # the lowest level best at every k: no optimum inside the range, B not shown, and futile on seeds 0-2
    v = level_verdicts(runs([("bonus_hold_quarter", 0.7, 0.9, 0.95), ("bonus_hold_half", 0.6, 0.8, 0.85),
                             ("bonus_hold", 0.45, 0.65, 0.7)]))
    assert v["claim_a"] == "not shown between 0.25x and 1x" and v["claim_b"] == "not shown" and v["futile"]
    # pass@64's best level is below pass@1's: B does not hold
    v = level_verdicts(runs([("bonus_hold_quarter", 0.5, 0.9, 0.99), ("bonus_hold_half", 0.6, 0.9, 0.95),
                             ("bonus_hold", 0.7, 0.9, 0.92)]))
    assert v["claim_b"] == "does not hold"
    # a level missing seed 4: judged on seeds 0-3 and said to be incomplete
    partial = [r for r in runs([("bonus_hold_quarter", 0.7, 0.9, 0.95), ("bonus_hold_half", 0.6, 0.8, 0.85),
                                ("bonus_hold", 0.45, 0.65, 0.7)]) if (r["method"], r["seed"]) != ("bonus_hold", 4)]
    v = level_verdicts(partial)
    assert v["seeds"] == [0, 1, 2, 3] and not v["complete"] and "INCOMPLETE" in levels_report(partial)


def test_constant_levels_read_both_caches_keep_the_first_run_and_skip_short_runs(tmp_path):
    from benchmarks.payoff import level_records

    study1, study9 = tmp_path / "study1.jsonl", tmp_path / "study9.jsonl"
    study1.write_text(json.dumps(_level_run("bonus_hold", 0, 0.4, 0.8, 0.9)) + "\n"
                      + json.dumps(_level_run("dapo", 0, 0.4, 0.8, 0.9)) + "\n")
    study9.write_text(json.dumps(_level_run("bonus_hold", 0, 0.1, 0.1, 0.1)) + "\n"
                      + json.dumps(_level_run("bonus_hold_quarter", 0, 0.5, 0.8, 0.9, steps=20)) + "\n"
                      + json.dumps(_level_run("bonus_hold_quarter", 1, 0.5, 0.8, 0.9)) + "\n")
    got = level_records([0], str(study1), str(study9))
    assert [(r["method"], r["seed"], r["final"]["all"]["pass_at_k"]["1"]) for r in got] == [("bonus_hold", 0, 0.4)]


def test_the_paired_figure_is_drawn_from_the_seeds_both_methods_have_and_not_from_one_pair(tmp_path):
    pytest.importorskip("matplotlib")
    from benchmarks.payoff_smollm2 import paired_figure

    def run(method, seed, p1, p16):
        return {"method": method, "seed": seed,
                "final": {"all": {"pass_at_k": {"1": p1, "2": (p1 + p16) / 2, "16": p16}}}}

    records = [run("grpo", s, 0.7, 0.9) for s in range(4)]
    records += [run("bonus_wsd03_unsolved_pos", s, 0.6 + 0.01 * s, 0.95) for s in range(3)]
    path = paired_figure(records, "bonus_wsd03_unsolved_pos", str(tmp_path / "pairs.png"))
    assert path and os.path.getsize(path) > 0
    assert paired_figure(records[:5], "bonus_wsd03_unsolved_pos", str(tmp_path / "one.png")) is None  # one pair


def test_every_results_file_is_read_by_a_doc_or_a_benchmark_and_the_folder_stays_small():
    """benchmarks/results/ holds what the docs' tables and the benchmarks read, compressed: a file nothing names is
    dead weight in every clone (and each of its versions stays in the history)."""
    import glob
    import re

    texts = []
    for pattern in ("docs/**/*.md", "README.md", "benchmarks/**/*.py"):
        for path in glob.glob(os.path.join(ROOT, pattern), recursive=True):
            with open(path, encoding="utf-8") as f:
                texts.append(f.read())
    text = "\n".join(texts)
    # `name.{txt,json}` in a doc names both files
    text += "\n".join(f"{m.group(1)}.{ext}" for m in re.finditer(r"([\w.-]+)\.\{([\w,.]+)\}", text)
                      for ext in m.group(2).split(","))
    folder = os.path.join(ROOT, "benchmarks", "results")
    names = sorted(os.listdir(folder))
    assert names, "benchmarks/results/ is empty"
    unread = [n for n in names if n not in text]
    assert not unread, f"benchmarks/results/ files that no doc or benchmark names: {unread}"
    plain = [n for n in names if n.endswith(".jsonl")]
    assert not plain, f"run caches are stored gzip-compressed (.jsonl.gz, benchmarks/_cache.py): {plain}"
    size = sum(os.path.getsize(os.path.join(folder, n)) for n in names)
    assert size < 10 * 2**20, f"benchmarks/results/ holds {size / 2**20:.1f} MB (at most 10 MB)"


def test_a_cache_appends_runs_compressed_or_plain_and_reads_them_back(tmp_path):
    import gzip

    from benchmarks._cache import append_row, read_rows

    for name in ("runs.jsonl.gz", "runs.jsonl"):
        path = str(tmp_path / "sub" / name)
        assert read_rows(path) == []
        append_row(path, {"key": "a", "x": [0.1, None]})
        append_row(path, {"key": "b", "x": 1})
        assert read_rows(path) == [{"key": "a", "x": [0.1, None]}, {"key": "b", "x": 1}]
        assert _runs.load_results(path) == {"a": {"key": "a", "x": [0.1, None]}, "b": {"key": "b", "x": 1}}
    with gzip.open(tmp_path / "sub" / "runs.jsonl.gz", "rt") as f:  # one gzip stream, members appended
        assert len(f.read().splitlines()) == 2


def test_payoff_runs_record_the_code_that_made_them_and_a_run_from_other_code_is_said(tmp_path, capsys):
    from benchmarks import payoff
    from benchmarks._cache import MADE_WITH, append_row, made_with_line, read_rows

    from trl_entropy import __version__

    def run(method, seed):
        return {"method": method, "seed": seed, "wall_s": 1.0,
                "final": {"all": {"pass_at_k": {"1": 0.5, "16": 0.9}, "greedy": 0.6, "entropy": 0.3}}}

    path = str(tmp_path / "payoff.jsonl.gz")
    payoff.run_cached("grpo,dapo", "0", path, run)
    rows = read_rows(path)
    assert [r[MADE_WITH]["trl_entropy"] for r in rows] == [__version__] * 2
    assert rows[1][MADE_WITH]["settings"] == {"method": "dapo", "overrides": {"epsilon_high": 0.28}}
    capsys.readouterr()
    payoff.run_cached("grpo,dapo", "0", path, run)  # all cached, made by this code: served without a word
    assert capsys.readouterr().out == ""
    old = dict(rows[0], seed=1)
    old.pop(MADE_WITH)
    append_row(path, old)
    payoff.run_cached("grpo", "0-1", path, run)
    out = capsys.readouterr().out
    assert "grpo seed 1 (version not recorded)" in out and "served" in out and "grpo seed 0" not in out
    line = made_with_line(read_rows(path))
    assert f"trl-entropy {__version__} at " in line
    assert "an unrecorded version (cached before runs recorded it): 1" in line


def test_diversity_check_reads_the_logged_series_on_the_study_windows_and_pairs_by_seed():
    """Issue 64's check (benchmarks/diversity_check.py) on made-up series: a logged run equal to the study's run of
    its seed differs by 0, batch i of the study's series is the batch logged at step 4i + 1, and a mean outside the
    combined standard error says no."""
    from benchmarks import diversity_check as dc

    steps = [4 * i + 1 for i in range(250)]

    def study(method, seed, hold, end):  # 250 generation batches: hold up to step 700, then the end value
        d = [hold if s <= 900 else end for s in steps]
        return {"method": method, "seed": seed, "steps": 1000, "distinct_answers": d}

    def logged(rec, shift=0.0):
        d = [x + shift for x in rec["distinct_answers"]]
        return {"method": rec["method"], "seed": rec["seed"], "steps": 1000, "wrapper_max_abs_diff": 0.0,
                "logged": {"step": steps, "distinct_answers": d, **{k: [1.0] * 250 for k in (
                    "distinct_answers_solved", "distinct_answers_unsolved", "answer_entropy", "solved_groups")}}}

    theirs = [study("grpo", s, 2.0 + 0.01 * s, 1.5 + 0.01 * s) for s in range(4)]
    theirs += [study("bonus_wsd03", s, 5.0 + 0.01 * s, 3.3) for s in range(4)]
    assert dc.study_value(theirs[0], (901, 1000)) == 1.5 and dc.study_value(theirs[0], (101, 700)) == 2.0
    assert dc.window_mean([1.0, None, 3.0], [1, 5, 9], (1, 9)) == 2.0  # a batch without the split is left out
    mine = [logged(r) for r in theirs[:3]] + [logged(r, shift=1.0) for r in theirs[4:7]]
    table = dc.report(mine, theirs)
    assert "| plain GRPO | end, steps 901-1000 | 1.52 ± 0.01 (4) | 1.51 ± 0.01 (3) | +0.00 ± 0.00 (3) | yes |" in table
    assert "| +1.00 ± 0.00 (3) | no |" in table  # the recipe's logs shifted by one answer
