"""A published table set beside a grid's results, statistic by statistic.

A reference file is JSON::

    {"source": "who published it, where, which tables",
     "budget": {"lbf": 20000000},                       # their env steps per run, per environment family
     "statistics": {
        "max_of_mean":  {"label": "Table 3: maximum return",
                         "lbf": {"Foraging-8x8-2p-2f-coop-v3": {"MAPPO": [1.00, 0.00]}}},
        "mean_of_mean": {"label": "Table 6: average return", "lbf": {...}}}}

Each value is ``[mean, half-width of its 95 % interval]``. ``max_of_mean`` is compared with the
best point of the grid's mean sampled learning curve, ``mean_of_mean`` with that curve's mean over
the evaluations (:func:`~marlparts.benchmark.statistics.task_figures`).
"""

import json
from typing import Any, Dict, List, Mapping, Optional

STATISTICS = ("max_of_mean", "mean_of_mean")


def load_reference(path: str) -> Dict[str, Any]:
    """A reference file (see the module), checked: an error names what is missing."""
    try:
        with open(path) as file:
            reference = json.load(file)
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"cannot read the reference file {path}: {error}") from error
    if not isinstance(reference.get("statistics"), dict):
        raise ValueError(f"the reference file {path} has no 'statistics' (a dict of {list(STATISTICS)})")
    unknown = set(reference["statistics"]) - set(STATISTICS)
    if unknown:
        raise ValueError(f"the reference file {path} names statistics {sorted(unknown)}; known: {list(STATISTICS)}")
    return reference


def reference_value(reference: Mapping[str, Any], statistic: str, environment: str, task: str,
                    algorithm: str) -> Optional[List[float]]:
    """``[mean, half-width]`` of the reference's ``statistic`` for one cell, or None where it gives none."""
    cell = reference["statistics"].get(statistic, {}).get(environment, {}).get(task, {}).get(algorithm)
    return None if cell is None else [float(value) for value in cell]


def reference_lines(reference: Mapping[str, Any], statistic: str, environment: str) -> Dict[str, Dict[str, float]]:
    """``{task: {algorithm: mean}}`` of the reference's ``statistic`` for ``environment`` (for the figures)."""
    tasks = reference["statistics"].get(statistic, {}).get(environment, {})
    return {task: {algorithm: float(cell[0]) for algorithm, cell in algorithms.items()} for task, algorithms in tasks.items()}


def comparison_rows(rows: List[Mapping[str, Any]], reference: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The grid's sampled-action rows (:func:`~marlparts.benchmark.statistics.per_task_table`) with the reference's
    figures beside them and the difference of each statistic (ours minus theirs).
    """
    greedy = {(row["environment"], row["task"], row["algorithm"]): row for row in rows if row["actions"] == "greedy"}
    compared = []
    for row in rows:
        if row["actions"] != "sampled":
            continue
        key = (row["environment"], row["task"], row["algorithm"])
        entry: Dict[str, Any] = {"environment": key[0], "task": key[1], "algorithm": key[2], "runs": row["runs"],
                                 "final_sampled": row["final"], "final_sampled_min": row["final_min"],
                                 "final_sampled_max": row["final_max"]}
        if key in greedy:
            entry["final_greedy"] = greedy[key]["final"]
        for statistic in STATISTICS:
            entry[statistic] = row[statistic]
            theirs = reference_value(reference, statistic, *key)
            if theirs is not None:
                entry[f"reference_{statistic}"] = theirs
                entry[f"difference_{statistic}"] = row[statistic] - theirs[0]
        compared.append(entry)
    return compared


def comparison_markdown(compared: List[Mapping[str, Any]], reference: Mapping[str, Any],
                        steps: Mapping[str, Any]) -> str:
    """The comparison as a Markdown table, one row per task and algorithm, with the reference's source and labels."""
    labels = {statistic: reference["statistics"].get(statistic, {}).get("label", statistic) for statistic in STATISTICS}
    lines = [f"Reference: {reference.get('source', 'unnamed')}.", "",
             f"- ours, max of mean: the best point of the mean sampled-action learning curve over runs "
             f"(the statistic of {labels['max_of_mean']}).",
             f"- ours, mean of mean: that curve's mean over all evaluations (the statistic of {labels['mean_of_mean']}).",
             "- final: the last evaluation, mean over runs (min to max), sampled and greedy actions.", "",
             "| environment | task | algorithm | runs | env steps (ours / theirs) | ours, max of mean | theirs | "
             "ours, mean of mean | theirs | final sampled (min to max) | final greedy |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def cell(entry: Mapping[str, Any], statistic: str) -> str:
        theirs = entry.get(f"reference_{statistic}")
        return "" if theirs is None else f"{theirs[0]:.2f} ± {theirs[1]:.2f}"

    for entry in compared:
        budget = reference.get("budget", {}).get(entry["environment"])
        ours = steps.get((entry["environment"], entry["task"], entry["algorithm"]))
        greedy = entry.get("final_greedy")
        lines.append(
            f"| {entry['environment']} | {entry['task']} | {entry['algorithm']} | {entry['runs']} | "
            f"{_steps(ours)} / {_steps(budget)} | {entry['max_of_mean']:.3f} | {cell(entry, 'max_of_mean')} | "
            f"{entry['mean_of_mean']:.3f} | {cell(entry, 'mean_of_mean')} | {entry['final_sampled']:.3f} "
            f"({entry['final_sampled_min']:.3f} to {entry['final_sampled_max']:.3f}) | "
            f"{'' if greedy is None else f'{greedy:.3f}'} |")
    return "\n".join(lines) + "\n"


def _steps(value: Optional[float]) -> str:
    if value is None:
        return "?"
    if value >= 1e6:
        return f"{value / 1e6:.3g}M"
    return f"{value / 1e3:.3g}k" if value >= 1e3 else f"{value:g}"
