"""Figures of an experiment, made from its records and samples (matplotlib, PNG and PDF).

* One figure per headline metric: the mean over seeds per policy, against the number of
  background flows (grouped bars, or lines for ZeroBubble), with error bars of the 95%
  Student-t confidence interval over seeds (:func:`safs.experiments.eval.experiments.t_interval`; no bar
  when there is one seed), clipped at 0. Each policy has its own colour, marker, line style
  (hatch for bars); SAFS is drawn last, on top; on line plots the policies are dodged
  horizontally by ``LINE_DODGE`` so equal series stay visible; legends sit outside the axes.
* For experiments with per-run samples (AFD: per-step TPOT; urgent: per-flow FCT): their
  empirical CDF per policy, samples of all seeds pooled, one panel per background level
  (y axis from 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib import pyplot as plt

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
    "collective_time_ms": "collective time (ms)",
    "collective_ratio": "collective time / bandwidth bound",
}


MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "<", ">")
LINESTYLES = ("-", "--", ":", "-.")
HATCHES = ("", "//", "..", "xx", "\\\\", "--", "++", "oo")
LINE_DODGE = 0.06  # horizontal offset between policies on line plots (background flows)


def policy_styles(policies: list[str]) -> dict[str, dict[str, Any]]:
    """Matplotlib line keywords per policy: distinct colour, marker and line style each.

    ``"safs"`` gets the highest ``zorder`` (drawn on top). Markers are hollow except SAFS's, so
    a policy whose numbers equal SAFS's (e.g. ``safs-no-classes``) still shows around it.
    """
    out = {}
    for i, p in enumerate(policies):
        color = plt.get_cmap("tab10")(i % 10)
        out[p] = {"color": color, "marker": MARKERS[i % len(MARKERS)], "linestyle": LINESTYLES[i % len(LINESTYLES)],
                  "markerfacecolor": color if p == "safs" else "none", "markersize": 5 if p == "safs" else 7,
                  "zorder": 3 if p == "safs" else 2}
    return out


def clipped_error(mean: np.ndarray, half: np.ndarray) -> np.ndarray:
    """Error bars of shape (2, n) for non-negative quantities (times, counts, ratios).

    ``half``: the interval half-widths (NaN = no interval, drawn as 0). The lower bar stops at 0
    (an interval reaching below 0 is clipped there); the upper bar is the half-width.
    """
    upper = np.where(np.isnan(half), 0.0, half)
    lower = np.minimum(upper, np.where(np.isnan(mean), 0.0, np.maximum(mean, 0.0)))
    return np.vstack([lower, upper])


def _save(fig: Any, base: Path) -> list[Path]:
    paths = [base.with_suffix(".png"), base.with_suffix(".pdf")]
    for p in paths:
        fig.savefig(p, bbox_inches="tight", dpi=150 if p.suffix == ".png" else None)
    return paths


def plot_experiment(exp: Any, records: list[dict[str, Any]], samples: list[dict[str, list[float]]],
                    rows: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """Write the experiment's figures into ``out_dir`` (created); returns the files written.

    Args:
        exp: the :class:`safs.experiments.eval.experiments.Experiment`.
        records: run records; ``samples[i]`` belongs to ``records[i]``.
        rows: :func:`safs.experiments.eval.experiments.summarize` rows for ``exp.metrics``.
    """
    matplotlib.use("Agg")  # files only, no display
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    listed = list(dict.fromkeys(r["policy"] for r in rows))
    style = policy_styles(listed)
    # SAFS last, so it is drawn on top of any policy with the same numbers.
    policies = sorted(listed, key=lambda p: p == "safs")
    levels = sorted({r["background_flows"] for r in rows})
    seeds = len({(r["seed"], r["repetition"]) for r in records})
    # x positions: background levels, or (swept values..., background) for swept experiments.
    group = tuple(exp.group_by)
    xkeys = sorted({(*(r[k] for k in group), r["background_flows"]) for r in rows}, key=str) if group else \
        [(b,) for b in levels]
    xlabels = [", ".join(str(v) for v in x) for x in xkeys]
    for metric in exp.metrics:
        fig, ax = plt.subplots(figsize=(7 + 0.4 * max(0, len(xkeys) - 6), 3.6))
        width = 0.8 / max(1, len(policies))
        for i, policy in enumerate(policies):
            pts = [
                next((r for r in rows if r["policy"] == policy
                      and (*(r[k] for k in group), r["background_flows"]) == x), None) for x in xkeys
            ]
            mean = np.array([p[f"{metric}_mean"] if p else np.nan for p in pts], dtype=float)
            half = np.array([p[f"{metric}_ci95"] if p else np.nan for p in pts], dtype=float)
            err = clipped_error(mean, half)
            offset = (i - (len(policies) - 1) / 2) * (LINE_DODGE if exp.lines else width)
            if exp.lines:
                ax.errorbar(
                    np.array(levels, dtype=float) + offset, mean, yerr=err, label=policy, capsize=3, **style[policy]
                )
            else:
                ax.bar(
                    np.arange(len(xkeys)) + offset,
                    mean,
                    width,
                    yerr=err,
                    label=policy,
                    color=style[policy]["color"],
                    hatch=HATCHES[i % len(HATCHES)],
                    capsize=2,
                    zorder=style[policy]["zorder"],
                )
        if exp.lines:
            ax.set_xticks(levels, [str(b) for b in levels])
        else:
            tick = {"rotation": 45, "ha": "right", "fontsize": 7} if group else {}
            ax.set_xticks(np.arange(len(xkeys)), xlabels, **tick)
        xlabel = ", ".join((*group, "background flows"))
        ax.set_xlabel(xlabel + (f" (policies dodged by {LINE_DODGE} for visibility)" if exp.lines else ""))
        ax.set_ylabel(LABELS.get(metric, metric))
        if not exp.lines:
            ax.set_ylim(bottom=0)
        ax.set_title(f"{exp.name}: mean over {seeds} seed(s), 95% t-interval", fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        ax.grid(axis="y", alpha=0.3)
        written += _save(fig, out_dir / metric)
        plt.close(fig)
    if exp.cdf and any(exp.cdf in s for s in samples):
        fig, axes = plt.subplots(1, len(levels), figsize=(3.6 * len(levels) + 1.4, 3.2), squeeze=False, sharey=True)
        for ax, bulk in zip(axes[0], levels):
            for policy in policies:
                vals = np.sort(
                    [
                        v
                        for r, s in zip(records, samples)
                        if r["policy"] == policy and r["background_flows"] == bulk
                        for v in s.get(exp.cdf, [])
                    ]
                )
                if len(vals):
                    # From (first sample, 0) up to (last sample, 1): the curve starts on the x axis.
                    ys = np.arange(0, len(vals) + 1) / len(vals)
                    line = {k: v for k, v in style[policy].items() if k != "marker"}
                    ax.step(np.concatenate(([vals[0]], vals)), ys, where="post", label=policy, **line)
            ax.set_title(f"{bulk} background flows", fontsize=9)
            ax.set_xlabel(LABELS.get(exp.cdf, exp.cdf))
            ax.set_ylim(0, 1.02)
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("CDF (seeds pooled)")
        handles, names = axes[0][0].get_legend_handles_labels()
        for ax in axes[0][1:]:  # a policy may have samples at some levels only
            for h, n in zip(*ax.get_legend_handles_labels()):
                if n not in names:
                    handles.append(h)
                    names.append(n)
        axes[0][-1].legend(handles, names, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
        written += _save(fig, out_dir / f"{exp.cdf}_cdf")
        plt.close(fig)
    return written
