"""The benchmark's command line.

    python -m marlparts.benchmark run GRID.json --out DIR [--workers N] [--ray auto|local|ADDRESS] [--only TEXT]
    python -m marlparts.benchmark status GRID.json --out DIR
    python -m marlparts.benchmark report DIR [--reference REFERENCE.json]

``run`` runs every run of the grid that has not finished (a second ``run`` resumes the grid);
``status`` lists the runs finished, running, failed, cut short and not started; ``report`` writes the report of the
finished runs to ``DIR/report/``.
"""

import argparse
import fnmatch
import os
import sys
from typing import Any, Dict, List, Optional

from marlparts.benchmark.grid import Grid
from marlparts.benchmark.report import write_report
from marlparts.benchmark.runner import run_grid, run_state


def parse_arguments(arguments: Optional[List[str]] = None) -> argparse.Namespace:
    """The command line's options."""
    parser = argparse.ArgumentParser(prog="python -m marlparts.benchmark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the grid's unfinished runs")
    run.add_argument("grid", help="the grid's JSON file")
    run.add_argument("--out", required=True, help="the grid's folder (results, logs, report)")
    run.add_argument("--workers", type=int, help="runs at a time (default: one per core, or as many as Ray takes)")
    run.add_argument("--ray", help="run on Ray: 'auto' (this machine's cluster), 'local' (start one) or an address")
    run.add_argument("--only", help="run only the runs whose environment/task/algorithm/seed_<s> matches this "
                                    "shell pattern (e.g. 'lbf/*/MAPPO/*')")
    status = commands.add_parser("status", help="list the runs finished, running, failed, cut short and not started")
    status.add_argument("grid", help="the grid's JSON file")
    status.add_argument("--out", required=True, help="the grid's folder")
    report = commands.add_parser("report", help="write the report of the finished runs to DIR/report/")
    report.add_argument("out", help="the grid's folder")
    report.add_argument("--reference", help="a published table to set beside the results (JSON)")
    report.add_argument("--repetitions", type=int, default=2000, help="bootstrap repetitions")
    report.add_argument("--no-figures", action="store_true", help="write no PNG figures")
    return parser.parse_args(arguments)


def left_out_lines(summary: Dict[str, Any]) -> List[str]:
    """What a report's table and statistics left out, one line each with its reason."""
    lines = [f"{entry['environment']}/{entry['task']}/{entry['algorithm']} ({entry['actions']} actions): "
             f"{entry['reason']}" for entry in summary["left_out"]]
    for environment, per_actions in summary["environments"].items():
        for actions, statistics in per_actions.items():
            for entry in statistics["left_out"]:
                what = "/".join(entry[key] for key in ("task", "algorithm") if key in entry)
                lines.append(f"{environment} aggregates ({actions} actions), {what}: {entry['reason']}")
    return lines


def main(arguments: Optional[List[str]] = None) -> int:
    """Run the command; the exit status is 1 where a run failed or was stopped."""
    args = parse_arguments(arguments)
    if args.command == "report":
        summary = write_report(args.out, reference=args.reference, repetitions=args.repetitions,
                               figures=not args.no_figures)
        print(f"report written to {os.path.join(args.out, 'report')}: {', '.join(summary['files'])}")
        for entry in left_out_lines(summary):
            print(f"left out: {entry}")
        return 0
    grid = Grid.from_file(args.grid)
    if args.command == "status":
        for run in grid.runs():
            print(f"{run_state(args.out, run):12} {run.key}")
        return 0
    only = (lambda run: fnmatch.fnmatch(run.key, args.only)) if args.only else None
    progress = run_grid(grid, args.out, workers=args.workers, ray_address=args.ray, only=only,
                        report=lambda line: print(line, flush=True))
    if progress.failed:
        print("failed runs (see failed.json in each run's folder):\n  " + "\n  ".join(progress.failed))
    if progress.stopped:
        print("runs stopped by a signal (the next run takes them up):\n  " + "\n  ".join(progress.stopped))
    return 1 if progress.failed or progress.stopped else 0


if __name__ == "__main__":
    sys.exit(main())
