"""Figures of an experiment, made from its records and samples (matplotlib, PNG and PDF).

* One figure per headline metric: the mean over seeds per policy, against the number of
  background flows (grouped bars, or lines for ZeroBubble), with error bars of the 95%
  Student-t confidence interval over seeds (:func:`safs.eval.experiments.t_interval`; no bar
  when there is one seed).
* For experiments with per-run samples (AFD: per-step TPOT; urgent: per-flow FCT): their
  empirical CDF per policy, samples of all seeds pooled, one panel per background level.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

LABELS = {
    "iteration_time_ms": "mean iteration time (ms)",
    "iteration_time_ratio": "iteration time / no-contention",
    "tpot_p50_ms": "TPOT p50 (ms)",
    "tpot_p99_ms": "TPOT p99 (ms)",
    "pipeline_deadline_misses": "pipeline deadline misses per run",
    "urgent_deadline_misses": "urgent deadline misses per run",
    "urgent_fct_mean_ms": "mean urgent FCT (ms)",
    "urgent_fct_p99_ms": "p99 urgent FCT (ms)",
    "tpot_ms": "TPOT (ms)",
    "urgent_fct_ms": "urgent FCT (ms)",
}


def _save(fig: Any, base: Path) -> list[Path]:
    paths = [base.with_suffix(".png"), base.with_suffix(".pdf")]
    for p in paths:
        fig.savefig(p, bbox_inches="tight", dpi=150 if p.suffix == ".png" else None)
    return paths


def plot_experiment(exp: Any, records: list[dict[str, Any]], samples: list[dict[str, list[float]]],
                    rows: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """Write the experiment's figures into ``out_dir`` (created); returns the files written.

    Args:
        exp: the :class:`safs.eval.experiments.Experiment`.
        records: run records; ``samples[i]`` belongs to ``records[i]``.
        rows: :func:`safs.eval.experiments.summarize` rows for ``exp.metrics``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    levels = sorted({r["background_flows"] for r in rows})
    colors = {p: plt.get_cmap("tab10")(i % 10) for i, p in enumerate(policies)}
    # Distinct dashes too, so policies with identical results (lines on top of each other) show.
    dashes = {p: ("-", "--", ":", "-.")[i % 4] for i, p in enumerate(policies)}
    seeds = len({(r["seed"], r["repetition"]) for r in records})
    for metric in exp.metrics:
        fig, ax = plt.subplots(figsize=(7, 3.6))
        width = 0.8 / max(1, len(policies))
        for i, policy in enumerate(policies):
            pts = [next((r for r in rows if r["policy"] == policy and r["background_flows"] == b), None) for b in levels]
            mean = np.array([p[f"{metric}_mean"] if p else np.nan for p in pts], dtype=float)
            half = np.array([p[f"{metric}_ci95"] if p else np.nan for p in pts], dtype=float)
            err = np.where(np.isnan(half), 0.0, half)
            if exp.lines:
                ax.errorbar(levels, mean, yerr=err, label=policy, color=colors[policy], marker="o", capsize=3,
                            linestyle=dashes[policy])
            else:
                x = np.arange(len(levels)) + (i - (len(policies) - 1) / 2) * width
                ax.bar(x, mean, width, yerr=err, label=policy, color=colors[policy], capsize=2)
        if not exp.lines:
            ax.set_xticks(np.arange(len(levels)), [str(b) for b in levels])
        ax.set_xlabel("background flows")
        ax.set_ylabel(LABELS.get(metric, metric))
        ax.set_title(f"{exp.name}: mean over {seeds} seed(s), 95% t-interval", fontsize=9)
        ax.legend(fontsize=7, ncol=2)
        ax.grid(axis="y", alpha=0.3)
        written += _save(fig, out_dir / metric)
        plt.close(fig)
    if exp.cdf and any(exp.cdf in s for s in samples):
        fig, axes = plt.subplots(1, len(levels), figsize=(3.6 * len(levels), 3.2), squeeze=False, sharey=True)
        for ax, bulk in zip(axes[0], levels):
            for policy in policies:
                vals = np.sort([v for r, s in zip(records, samples)
                                if r["policy"] == policy and r["background_flows"] == bulk for v in s.get(exp.cdf, [])])
                if len(vals):
                    ax.step(vals, np.arange(1, len(vals) + 1) / len(vals), where="post", label=policy,
                            color=colors[policy], linestyle=dashes[policy])
            ax.set_title(f"{bulk} background flows", fontsize=9)
            ax.set_xlabel(LABELS.get(exp.cdf, exp.cdf))
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("CDF (seeds pooled)")
        axes[0][-1].legend(fontsize=7)
        written += _save(fig, out_dir / f"{exp.cdf}_cdf")
        plt.close(fig)
    return written
