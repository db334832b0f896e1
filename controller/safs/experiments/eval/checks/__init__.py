"""Baselines' own-paper checks: one module per baseline (``homa``, ``pfabric``, ``d2tcp``), each
with ``run_check(quick: bool = True) -> dict`` reproducing a result of that baseline's own paper
on our simulator (docs/baselines.md). ``safs eval baseline-checks`` imports them lazily and runs
them in parallel (:func:`safs.experiments.eval.experiments.run_baseline_checks`).
"""
