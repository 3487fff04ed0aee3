"""The report's figures, drawn with matplotlib (and rliable's plot helpers): PNG files.

- ``curves_<environment>.png``: one panel per task, each algorithm's mean learning curve over runs
  with its 95 % bootstrap band, sampled actions solid and greedy dashed, and a reference figure (a
  published table's) as a dotted line where one is given.
- ``aggregates_<environment>.png``: IQM, mean, median and optimality gap of the normalised final
  sampled returns, with their 95 % stratified bootstrap intervals.
- ``improvement_<environment>.png``: the probability that one algorithm improves on another.
"""

import math
import os
from typing import Any, Dict, List, Mapping, Optional

from marlparts.benchmark.marl_eval import METRICS
from marlparts.benchmark.statistics import AGGREGATES, mean_curves


def _pyplot():
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError("the benchmark's figures need matplotlib: pip install 'marlparts[report]'") from error
    matplotlib.use("Agg")  # files only: no screen needed
    import matplotlib.pyplot as pyplot

    return pyplot


def _colours(algorithms: List[str]) -> Dict[str, Any]:
    palette = _pyplot().get_cmap("tab10")
    return {algorithm: palette(i % 10) for i, algorithm in enumerate(algorithms)}


def learning_curve_figure(data: Mapping[str, Any], environment: str, path: str, *,
                          reference: Optional[Mapping[str, Mapping[str, float]]] = None,
                          reference_label: str = "reference") -> str:
    """Draw every task of ``environment`` (sample-efficiency curves, see the module) to ``path``; ``reference`` is
    ``{task: {algorithm: value}}`` drawn as dotted lines in each algorithm's colour.
    """
    pyplot = _pyplot()
    tasks = sorted(data[environment])
    algorithms = sorted({algorithm for task in tasks for algorithm in data[environment][task]})
    colours = _colours(algorithms)
    columns = min(3, len(tasks))
    rows = math.ceil(len(tasks) / columns)
    figure, axes = pyplot.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), squeeze=False)
    for panel, task in zip(axes.flat, tasks):
        for actions, style in (("sampled", "-"), ("greedy", "--")):
            for algorithm, curve in mean_curves(data, environment, task, algorithms, METRICS[actions]).items():
                panel.plot(curve["steps"], curve["mean"], style, color=colours[algorithm],
                           label=f"{algorithm} ({actions})")
                panel.fill_between(curve["steps"], curve["interval"][0], curve["interval"][1],
                                   color=colours[algorithm], alpha=0.15 if actions == "sampled" else 0.07, linewidth=0)
        for algorithm, value in (reference or {}).get(task, {}).items():
            if algorithm in colours:
                panel.axhline(value, linestyle=":", color=colours[algorithm], linewidth=1)
        panel.set_title(task, fontsize=9)
        panel.set_xlabel("env steps")
        panel.set_ylabel("return")
        panel.grid(alpha=0.3)
    for panel in list(axes.flat)[len(tasks):]:
        panel.axis("off")
    entries: Dict[str, Any] = {}  # every algorithm drawn in any panel, once (not every task has every algorithm)
    for panel in axes.flat:
        for handle, label in zip(*panel.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    labels = sorted(entries)
    handles = [entries[label] for label in labels]
    if reference:
        handles.append(pyplot.Line2D([], [], linestyle=":", color="grey"))
        labels.append(reference_label)
    figure.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
    figure.tight_layout(rect=(0, 0.06 + 0.02 * math.ceil(len(labels) / 4), 1, 1))
    return _save(figure, path)


def aggregates_figure(aggregates: Mapping[str, Mapping[str, Mapping[str, float]]], path: str, *, title: str = "") -> str:
    """Draw the aggregate statistics (:func:`~marlparts.benchmark.statistics.aggregate_scores`) as intervals to ``path``."""
    pyplot = _pyplot()
    algorithms = sorted(aggregates)
    colours = _colours(algorithms)
    figure, axes = pyplot.subplots(1, len(AGGREGATES), figsize=(3.2 * len(AGGREGATES), 0.5 * len(algorithms) + 1.4),
                                   squeeze=False)
    for panel, statistic in zip(axes.flat, AGGREGATES):
        for row, algorithm in enumerate(algorithms):
            figures = aggregates[algorithm][statistic]
            panel.barh(row, figures["high"] - figures["low"], left=figures["low"], height=0.6,
                       color=colours[algorithm], alpha=0.75)
            panel.plot([figures["value"]] * 2, [row - 0.3, row + 0.3], color="black", linewidth=1.5)
        panel.set_yticks(range(len(algorithms)))
        panel.set_yticklabels(algorithms if statistic == AGGREGATES[0] else [])
        panel.set_title(statistic, fontsize=10)
        panel.set_xlim(-0.02, 1.02)  # scores are normalised to [0, 1] per task
        panel.set_xlabel("normalised score")
        panel.grid(axis="x", alpha=0.3)
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    return _save(figure, path)


def improvement_figure(probabilities: List[Mapping[str, Any]], path: str, *, title: str = "") -> str:
    """Draw P(X > Y) of every ordered pair with its interval to ``path``."""
    pyplot = _pyplot()
    figure, panel = pyplot.subplots(figsize=(6, 0.45 * len(probabilities) + 1.2))
    for row, pair in enumerate(probabilities):
        panel.barh(row, pair["high"] - pair["low"], left=pair["low"], height=0.6, color="tab:blue", alpha=0.6)
        panel.plot([pair["value"]] * 2, [row - 0.3, row + 0.3], color="black", linewidth=1.5)
    panel.axvline(0.5, color="grey", linestyle=":")
    panel.set_yticks(range(len(probabilities)))
    panel.set_yticklabels([f"P({pair['algorithm']} > {pair['over']})" for pair in probabilities], fontsize=8)
    panel.set_xlim(0, 1)
    panel.set_xlabel("probability of improvement")
    if title:
        panel.set_title(title, fontsize=10)
    figure.tight_layout()
    return _save(figure, path)


def _save(figure: Any, path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=110)
    _pyplot().close(figure)
    return path

