"""What a benchmark runs: algorithms x tasks x seeds, each run one of the user's own scripts or functions.

A grid is written as JSON (or built in Python)::

    {
      "seeds": [0, 1, 2],
      "evaluations": 41,
      "eval_episodes": 100,
      "cells": [
        {"algorithm": "MAPPO", "environment": "lbf", "script": "examples/lbf/foraging_mappo.py",
         "tasks": ["Foraging-8x8-2p-2f-coop-v3", "Foraging-10x10-3p-3f-v3"], "timesteps": 2000000},
        {"algorithm": "Mine", "environment": "lbf", "function": "my_package.experiments:train",
         "tasks": ["Foraging-8x8-2p-2f-coop-v3"], "timesteps": 2000000, "eval_episodes": 50}
      ]
    }

A cell is one algorithm on some tasks of one environment family; ``seeds``, ``timesteps``,
``evaluations`` and ``eval_episodes`` may be set per cell or for the whole grid. A script is
started as ``python SCRIPT`` followed by ``arguments`` (by default :data:`SCRIPT_ARGUMENTS`), in
which ``{task}``, ``{seed}``, ``{timesteps}``, ``{directory}``, ``{evaluations}`` and
``{eval_episodes}`` are filled in; a function ``"module:name"`` is called with those six as keyword
arguments, in a process of its own. Either trains and evaluates with a
:class:`~marlparts.trainers.SequentialTrainer` whose experiment folder lies under ``directory``:
the ``evaluations.jsonl`` it writes there is the run's result.

A cell with ``"resumable": true`` says that its script or function, started again with the same
``directory``, goes on from what an earlier start left there (the examples' ``--resume``: the newest
checkpoint, written at every evaluation; a script's arguments are then by default
:data:`RESUMABLE_SCRIPT_ARGUMENTS`, and ``arguments`` of its own must include ``--resume``). The runner
then starts a run that was cut short (the driver stopped, the machine went down) again in its own
folder rather than from the beginning.
"""

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

SCRIPT_ARGUMENTS = ("--env", "{task}", "--seed", "{seed}", "--timesteps", "{timesteps}", "--directory", "{directory}",
                    "--evaluations", "{evaluations}", "--episodes", "{eval_episodes}")
"""The command-line arguments a script is given by default (the examples' options)."""

RESUMABLE_SCRIPT_ARGUMENTS = SCRIPT_ARGUMENTS + ("--resume",)
"""The arguments of a ``resumable`` cell's script by default: the examples go on from the newest checkpoint under
``--directory``, if there is one.
"""

_GRID_KEYS = {"seeds", "evaluations", "eval_episodes", "timesteps", "cells", "name"}
_CELL_KEYS = {"algorithm", "environment", "tasks", "script", "function", "arguments", "seeds", "timesteps",
              "evaluations", "eval_episodes", "resumable"}


@dataclass(frozen=True)
class RunSpec:
    """One run of a grid: an algorithm on a task with a seed, and how to start it.

    Attributes:
        algorithm: the algorithm's name in reports.
        environment: the environment family (``"lbf"``, ``"rware"``...), the first level of marl-eval's layout.
        task: the task id given to the script or function.
        seed: the run's seed.
        timesteps: env steps to train for (every env copy counted).
        evaluations: evaluations over the run, the first before training.
        eval_episodes: episodes of each evaluation (per kind of action: greedy and sampled).
        script: the path of the script to run (or None).
        function: ``"module:name"`` of the function to call (or None).
        arguments: the script's argument template.
        resumable: started again in the folder of an attempt that was cut short, it goes on from there.
    """

    algorithm: str
    environment: str
    task: str
    seed: int
    timesteps: int
    evaluations: int
    eval_episodes: int
    script: Optional[str] = None
    function: Optional[str] = None
    arguments: Sequence[str] = SCRIPT_ARGUMENTS
    resumable: bool = False

    @property
    def key(self) -> str:
        """The run's folder below the grid's ``runs/``: ``environment/task/algorithm/seed_<seed>``."""
        return os.path.join(self.environment, self.task, self.algorithm, f"seed_{self.seed}")

    def fields(self, directory: str) -> Dict[str, Any]:
        """The values filled into the argument template (and passed to a function) for a run in ``directory``."""
        return {"task": self.task, "seed": self.seed, "timesteps": self.timesteps, "directory": directory,
                "evaluations": self.evaluations, "eval_episodes": self.eval_episodes}


def _name_problem(name: str) -> Optional[str]:
    """Why ``name`` cannot name an algorithm, environment or task, or None: each is a folder of the run's path
    (``runs/<environment>/<task>/<algorithm>/``) and a key of marl-eval's layout, whose loaders refuse commas.
    """
    if not name.strip() or name.startswith(".") or name.endswith((".", " ")) or "/" in name or "\\" in name:
        return ("cannot be a folder's name on every system (not empty, no '/' or '\\', no '.' first, no '.' or "
                "space last)")
    if "," in name:
        return "holds a comma, which marl-eval's layout does not allow in names"
    return None


@dataclass
class Grid:
    """Algorithms x tasks x seeds: the runs of a benchmark.

    Attributes:
        cells: one dict per algorithm and environment family (keys as in the module's description).
        seeds: the seeds of every cell that sets none.
        timesteps: the budget of every cell that sets none.
        evaluations: evaluations per run (EPyMARL: 41, the first before training).
        eval_episodes: episodes per evaluation (EPyMARL: 100).
        base: the folder relative script paths are read from (the grid file's folder).
    """

    cells: List[Dict[str, Any]]
    seeds: Sequence[int] = (0, 1, 2)
    timesteps: Optional[int] = None
    evaluations: int = 41
    eval_episodes: int = 100
    base: str = field(default_factory=os.getcwd)

    @classmethod
    def from_file(cls, path: str) -> "Grid":
        """The grid of a JSON file; relative script paths are taken from the file's folder."""
        try:
            with open(path) as file:
                data = json.load(file)
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"cannot read the grid file {path}: {error}") from error
        return cls.from_dict(data, base=os.path.dirname(os.path.abspath(path)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base: Optional[str] = None) -> "Grid":
        """The grid of a dict in the JSON file's layout."""
        unknown = set(data) - _GRID_KEYS
        if unknown:
            raise ValueError(f"unknown grid key(s) {sorted(unknown)}; a grid has {sorted(_GRID_KEYS)}")
        if not isinstance(data.get("cells"), list) or not data["cells"]:
            raise ValueError("a grid needs 'cells': a list of {'algorithm', 'environment', 'tasks', 'script' or "
                             "'function', ...}")
        settings = {key: data[key] for key in ("seeds", "timesteps", "evaluations", "eval_episodes") if key in data}
        return cls(cells=[dict(cell) for cell in data["cells"]], base=base or os.getcwd(), **settings)

    def runs(self) -> List[RunSpec]:
        """Every run of the grid, cell by cell, task by task, seed by seed (checked: a bad cell is an error that
        names it, raised before anything runs).
        """
        runs = [run for index, cell in enumerate(self.cells) for run in self._cell_runs(index, cell)]
        keys = [run.key for run in runs]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            raise ValueError(f"the grid holds these runs twice (same environment, task, algorithm and seed): {repeated}")
        return runs

    def _cell_runs(self, index: int, cell: Mapping[str, Any]) -> Iterator[RunSpec]:
        where = f"grid cell {index} ({cell.get('algorithm', '?')} on {cell.get('environment', '?')})"
        unknown = set(cell) - _CELL_KEYS
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; a cell has {sorted(_CELL_KEYS)}")
        for key in ("algorithm", "environment", "tasks"):
            if not cell.get(key):
                raise ValueError(f"{where}: '{key}' is missing")
        if ("script" in cell) == ("function" in cell):
            raise ValueError(f"{where}: give either 'script' (a path) or 'function' ('module:name'), not both or none")
        if "function" in cell and ":" not in cell["function"]:
            raise ValueError(f"{where}: 'function' must read 'module:name', got {cell['function']!r}")
        script = cell.get("script")
        if script is not None:
            script = script if os.path.isabs(script) else os.path.normpath(os.path.join(self.base, script))
            if not os.path.isfile(script):
                raise ValueError(f"{where}: the script {script} does not exist")
        timesteps = cell.get("timesteps", self.timesteps)
        numbers = {"timesteps": timesteps, "evaluations": cell.get("evaluations", self.evaluations),
                   "eval_episodes": cell.get("eval_episodes", self.eval_episodes)}
        for key, value in numbers.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{where}: '{key}' must be a positive int, got {value!r}")
        if numbers["evaluations"] < 2:
            raise ValueError(f"{where}: 'evaluations' must be at least 2 (one before training, one at its end)")
        resumable = cell.get("resumable", False)
        if not isinstance(resumable, bool):
            raise ValueError(f"{where}: 'resumable' must be true or false, got {resumable!r}")
        arguments = cell.get("arguments", RESUMABLE_SCRIPT_ARGUMENTS if resumable else SCRIPT_ARGUMENTS)
        if isinstance(arguments, str) or not all(isinstance(argument, str) for argument in arguments):
            raise ValueError(f"{where}: 'arguments' must be a list of strings, got {arguments!r}")
        if resumable and script is not None and "--resume" not in arguments:
            raise ValueError(f"{where}: a resumable cell's script goes on from its folder when given --resume: add "
                             "\"--resume\" to its 'arguments' (or make the cell not resumable)")
        fields = RunSpec("", "", "", 0, 1, 2, 1).fields("")
        for argument in arguments:
            try:
                argument.format(**fields)
            except (KeyError, IndexError, ValueError) as error:
                raise ValueError(f"{where}: the argument {argument!r} names {error}, which is none of {sorted(fields)}") \
                    from error
        tasks = [cell["tasks"]] if isinstance(cell["tasks"], str) else list(cell["tasks"])
        for kind, name in [("algorithm", cell["algorithm"]), ("environment", cell["environment"])] + [
                ("task", task) for task in tasks]:
            problem = _name_problem(str(name))
            if problem:
                raise ValueError(f"{where}: the {kind} {str(name)!r} {problem}")
        for task in tasks:
            for seed in cell.get("seeds", self.seeds):
                yield RunSpec(algorithm=str(cell["algorithm"]), environment=str(cell["environment"]), task=str(task),
                              seed=int(seed), script=script, function=cell.get("function"),
                              arguments=tuple(arguments), resumable=resumable, **numbers)
