"""A grid's report: raw results in marl-eval's layout, the field's statistics, figures, and a published table
beside them.

Written to ``<grid folder>/report/``:

- ``marl_eval.json``: every finished run's learning curve in marl-eval's layout
  (:mod:`marlparts.benchmark.marl_eval`), readable by marl-eval's own tools;
- ``summary.json``: per task and algorithm the figures of :func:`~marlparts.benchmark.statistics.task_figures`
  (sampled and greedy actions), and under ``left_out`` the runs that could not be set together (evaluated on
  different schedules) with the reason; per environment family the aggregates and probabilities of
  improvement (rliable), with what they leave out and why; and the comparison with the reference where one
  is given;
- ``curves_<environment>.png``, ``aggregates_<environment>.png``, ``improvement_<environment>.png``;
- ``comparison.md``: the reference's table beside ours, where a reference is given.
"""

import os
from typing import Any, Dict, Optional

from marlparts.benchmark.figures import aggregates_figure, improvement_figure, learning_curve_figure
from marlparts.benchmark.marl_eval import to_marl_eval
from marlparts.benchmark.reference import comparison_markdown, comparison_rows, load_reference, reference_lines
from marlparts.benchmark.runner import load_results
from marlparts.benchmark.statistics import environment_statistics, per_task_table
from marlparts.utils.files import write_json_atomically


def write_report(out: str, *, reference: Optional[str] = None, repetitions: int = 2000,
                 figures: bool = True) -> Dict[str, Any]:
    """Write the report of the finished runs in the grid folder ``out`` (see the module) and return the summary.

    Args:
        out: the grid's folder.
        reference: a reference file (:mod:`marlparts.benchmark.reference`) to set beside the results.
        repetitions: bootstrap repetitions of the intervals.
        figures: draw the PNG figures.

    Raises:
        ValueError: no run of the grid has finished yet.
    """
    results = load_results(out)
    if not results:
        raise ValueError(f"no run in {out} has finished (no runs/**/result.json): nothing to report")
    folder = os.path.join(out, "report")
    data = to_marl_eval(results)
    write_json_atomically(data, os.path.join(folder, "marl_eval.json"))
    rows, left_out = per_task_table(data)
    summary: Dict[str, Any] = {"tasks": rows, "left_out": left_out,
                               "environments": environment_statistics(data, repetitions=repetitions),
                               "files": ["marl_eval.json", "summary.json"]}
    table = load_reference(reference) if reference else None
    if table is not None:
        summary["reference"] = {"source": table.get("source"), "comparison": comparison_rows(rows, table)}
        steps = {(row["environment"], row["task"], row["algorithm"]): row["env_steps"] for row in rows
                 if row["actions"] == "sampled"}
        with open(os.path.join(folder, "comparison.md"), "w") as file:
            file.write(comparison_markdown(summary["reference"]["comparison"], table, steps))
        summary["files"].append("comparison.md")
    if figures:
        for environment in data:
            lines = reference_lines(table, "max_of_mean", environment) if table is not None else None
            label = table["statistics"].get("max_of_mean", {}).get("label", "reference") if table is not None else ""
            summary["files"].append(os.path.basename(learning_curve_figure(
                data, environment, os.path.join(folder, f"curves_{environment}.png"), reference=lines,
                reference_label=label)))
            sampled = summary["environments"].get(environment, {}).get("sampled")
            if sampled and sampled["tasks"]:
                title = f"{environment}: final sampled returns over {', '.join(sampled['tasks'])}"
                summary["files"].append(os.path.basename(aggregates_figure(
                    sampled["aggregates"], os.path.join(folder, f"aggregates_{environment}.png"), title=title)))
                if sampled["probability_of_improvement"]:
                    summary["files"].append(os.path.basename(improvement_figure(
                        sampled["probability_of_improvement"], os.path.join(folder, f"improvement_{environment}.png"),
                        title=title)))
    write_json_atomically(summary, os.path.join(folder, "summary.json"))
    return summary
