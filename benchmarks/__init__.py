"""The benchmark studies: run from the repository root as modules, e.g. ``python -m benchmarks.tracking --help``.

``_runs`` is the shared harness (the run cache, its keys, the statistics); each study imports it as
``benchmarks._runs``. The caches that docs/benchmarks.md's tables read are in ``benchmarks/results/``. Studies that
the user docs no longer cite, kept so that docs/research-log.md's commands still run, are in ``benchmarks/archive/``.
"""
