"""The researcher's outer loop: a grid of runs (algorithms x tasks x seeds), each one of the user's own
scripts or functions in a process of its own, on a local process pool or on Ray; finished runs are
never run again; reports in marl-eval's layout with rliable's statistics and matplotlib figures.

From the command line: ``python -m marlparts.benchmark run GRID.json --out DIR`` and
``python -m marlparts.benchmark report DIR``.
"""

from marlparts.benchmark.execution import Outcome, read_learning_curve
from marlparts.benchmark.grid import SCRIPT_ARGUMENTS, Grid, RunSpec
from marlparts.benchmark.marl_eval import learning_curves, to_marl_eval
from marlparts.benchmark.report import write_report
from marlparts.benchmark.runner import GridProgress, load_results, run_grid

__all__ = ["SCRIPT_ARGUMENTS", "Grid", "GridProgress", "Outcome", "RunSpec", "learning_curves", "load_results",
           "read_learning_curve", "run_grid", "to_marl_eval", "write_report"]
