"""Many tracking runs side by side on one GPU: one ``tracking.py`` process per run, ``--parallel`` at a time.

A SmolLM2 testbed run (135M parameters, completions of 4 tokens, 12 per step) leaves a GPU mostly idle, so runs side
by side cost little more wall time than one. Each run writes its own JSON-lines cache under ``--workdir``; every few
seconds, and at the end, the finished rows of all of them are written to ``--merged`` (one row per key), so a sweep
cut short keeps what finished. Each run gets one CPU thread (``OMP_NUM_THREADS=1``) unless the variable is set.
Jobs start in the order given (put what matters first); with ``--budget`` no job starts once the time left is
shorter than 1.3x the slowest run so far (before the first one ends, than ``--guess``).

The jobs file is a JSON list of argument lists added to the common arguments after ``--``, e.g.::

    [["--targets", "hold", "--methods", "entropy_bonus", "--seeds", "3"], ...]

    python -m benchmarks.parallel_tracking --jobs jobs.json --parallel 12 --merged runs.jsonl --budget 540 -- \\
        --testbed smollm2 --steps 100 --h0 0.954 --device cuda --final_eval

Before the jobs, the starting model's evaluation (``--final_eval``'s first row) is computed once and copied into
every run's cache, so that no run repeats it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where `benchmarks` is a package
TRACKING = [sys.executable, "-m", "benchmarks.tracking"]


def _env(**extra: str) -> dict[str, str]:
    """The environment of a child run: the repository root first on PYTHONPATH, so that ``-m benchmarks.tracking``
    resolves from any working directory."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, **extra, "PYTHONPATH": ROOT + (os.pathsep + path if path else "")}


def merge(workdir: str, merged: str) -> int:
    """Write every finished row under ``workdir`` (one per key, first seen) to ``merged`` (gzip-compressed where its
    name ends in ``.gz``); return the count."""
    rows, seen = [], set()
    for name in sorted(os.listdir(workdir)):
        if not name.endswith(".jsonl"):
            continue
        with open(os.path.join(workdir, name)) as f:
            for line in f:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a row being written
                    continue
                if row.get("key") not in seen:
                    seen.add(row.get("key"))
                    rows.append(line if line.endswith("\n") else line + "\n")
    tmp = merged + ".tmp"
    with (gzip.open(tmp, "wt") if merged.endswith(".gz") else open(tmp, "w")) as f:  # as benchmarks._cache reads it
        f.writelines(rows)
    os.replace(tmp, merged)
    return len(rows)


def prepare(common: list[str], workdir: str) -> str:
    """Compute the starting model's evaluation once (if ``--final_eval``); return the seed cache file."""
    seed_file = os.path.join(workdir, "start.jsonl")
    open(seed_file, "a").close()
    if "--final_eval" in common:
        args = common + ["--results", seed_file, "--methods", "grpo", "--seeds", "0", "--steps", "1",
                         "--prepare_only"]
        subprocess.run([*TRACKING, *args], check=True, env=_env())
    return seed_file


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", required=True, help="JSON file: a list of argument lists, one per run")
    p.add_argument("--parallel", type=int, default=8, help="runs at a time")
    p.add_argument("--merged", required=True, help="JSON-lines file that receives every finished row")
    p.add_argument("--workdir", default="/tmp/parallel_tracking", help="one cache file and one log per run")
    p.add_argument("--budget", type=float, default=None, help="seconds: start no run that would not finish in time")
    p.add_argument("--guess", type=float, default=180.0, help="seconds one run takes, until one has finished")
    p.add_argument("common", nargs=argparse.REMAINDER, help="-- then tracking.py arguments shared by every run")
    a = p.parse_args(argv)
    common = a.common[1:] if a.common[:1] == ["--"] else a.common
    try:
        with open(a.jobs) as f:
            jobs = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        p.error(f"--jobs {a.jobs}: {e}")
    if not isinstance(jobs, list) or not all(isinstance(j, list) and all(isinstance(x, str) for x in j)
                                             for j in jobs):
        p.error(f"--jobs {a.jobs}: expected a JSON list of argument lists (strings), e.g. "
                '[["--targets", "hold", "--seeds", "0"]]')
    os.makedirs(a.workdir, exist_ok=True)
    t0 = time.time()
    seed_file = prepare(common, a.workdir)
    print(f"prepared in {time.time() - t0:.0f} s", flush=True)
    # one CPU thread per run unless told otherwise: runs side by side, each with as many threads as there are
    # cores, oversubscribe them (two tiny runs on 2 cores took 95 s each instead of 14 s)
    env = _env(OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    pending = list(enumerate(jobs))
    running: dict[int, tuple[subprocess.Popen, float, object]] = {}
    durations: list[float] = []
    failed: list[int] = []
    last_merge = 0.0
    while pending or running:
        for i, (proc, started, log) in list(running.items()):
            if proc.poll() is not None:
                log.close()
                durations.append(time.time() - started)
                print(f"[{time.time() - t0:6.0f} s] job {i} exit {proc.returncode} in {durations[-1]:.0f} s: "
                      f"{' '.join(jobs[i])}", flush=True)
                if proc.returncode:
                    failed.append(i)
                    with open(log.name) as f:
                        print("".join(f.readlines()[-15:]), flush=True)
                del running[i]
        left = None if a.budget is None else a.budget - (time.time() - t0)
        while pending and len(running) < a.parallel:
            need = 1.3 * (max(durations) if durations else a.guess)
            if left is not None and left < need:
                print(f"[{time.time() - t0:6.0f} s] {len(pending)} jobs not started: {left:.0f} s left, a run "
                      f"takes ~{need / 1.3:.0f} s", flush=True)
                pending = []
                break
            i, extra = pending.pop(0)
            cache = os.path.join(a.workdir, f"job{i:03d}.jsonl")
            shutil.copyfile(seed_file, cache)
            log = open(os.path.join(a.workdir, f"job{i:03d}.log"), "w")
            # each run its own cache and its own trainer output folder (runs side by side never share a file)
            cmd = [*TRACKING, *common, *extra, "--results", cache,
                   "--output_dir", os.path.join(a.workdir, f"job{i:03d}")]
            running[i] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), time.time(), log)
        if time.time() - last_merge > 5:
            merge(a.workdir, a.merged)
            last_merge = time.time()
        time.sleep(0.5)
    n = merge(a.workdir, a.merged)
    print(f"done in {time.time() - t0:.0f} s: {n} rows in {a.merged}", flush=True)
    if failed:
        print(f"{len(failed)} of {len(jobs)} jobs failed: {failed} (logs in {a.workdir})", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
