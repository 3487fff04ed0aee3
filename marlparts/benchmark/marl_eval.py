"""Finished runs in marl-eval's raw-data layout, and the learning curves read back from it.

The layout (marl-eval's README, "Data Structure for Raw Experiment data")::

    {environment: {task: {algorithm: {"run_<seed>": {
        "step_<i>": {"step_count": <env steps>, "episode_return": [...], "greedy_episode_return": [...]},
        ...,
        "absolute_metrics": {"episode_return": [...], "greedy_episode_return": [...]}}}}}}

``episode_return`` holds the returns of the evaluation episodes with actions sampled from the
policies, ``greedy_episode_return`` those with the greedy actions (each a team's return: the sum over
its agents where the task's reward is the team's). ``absolute_metrics`` holds the last evaluation's
episodes. ``step_<i>`` counts the evaluations from 0 (the one before training).
"""

from typing import Any, Dict, List, Mapping, Sequence

import numpy as np

METRICS = {"sampled": "episode_return", "greedy": "greedy_episode_return"}
"""The layout's metric name of each kind of evaluation action."""


def to_marl_eval(results: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The finished runs' learning curves (``result.json`` of each) in marl-eval's layout."""
    data: Dict[str, Any] = {}
    for result in results:
        runs = data.setdefault(result["environment"], {}).setdefault(result["task"], {}).setdefault(
            result["algorithm"], {})
        run: Dict[str, Any] = {}
        for index, point in enumerate(result["evaluations"]):
            step = {"step_count": int(point["env_steps"])}
            for actions, metric in METRICS.items():
                if point.get(actions):
                    step[metric] = [float(value) for value in point[actions]["episode_returns"]]
            run[f"step_{index}"] = step
        run["absolute_metrics"] = {metric: values for metric, values in run[f"step_{len(result['evaluations']) - 1}"]
                                   .items() if metric != "step_count"}
        runs[f"run_{result['seed']}"] = run
    return data


def _step_index(key: str) -> int:
    return int(key.split("_", 1)[1])


def learning_curves(data: Mapping[str, Any], environment: str, task: str, algorithm: str,
                    metric: str = "episode_return") -> Dict[str, np.ndarray]:
    """The runs of one algorithm on one task, read from marl-eval's layout: ``"steps"`` ``(evaluations,)`` and
    ``"returns"`` ``(runs, evaluations)``, each run's mean return of ``metric`` at each evaluation. Runs with
    fewer evaluations than the others cut every run to the shortest.

    Raises:
        KeyError: a run has no ``metric``.
        ValueError: the runs were evaluated at different step counts, naming them.
    """
    runs = data[environment][task][algorithm]
    curves: List[List[float]] = []
    steps: Dict[str, List[int]] = {}
    for name in sorted(runs, key=_step_index):
        keys = sorted((key for key in runs[name] if key.startswith("step_")), key=_step_index)
        if metric not in runs[name][keys[0]]:
            raise KeyError(f"{environment}/{task}/{algorithm}/{name} has no {metric!r} (it has "
                           f"{sorted(runs[name][keys[0]])})")
        curves.append([float(np.mean(runs[name][key][metric])) for key in keys])
        steps[name] = [int(runs[name][key]["step_count"]) for key in keys]
    length = min(len(curve) for curve in curves)
    counts = {name: tuple(run_steps[:length]) for name, run_steps in steps.items()}
    if len(set(counts.values())) > 1:
        raise ValueError(f"the runs of {algorithm} on {environment}/{task} were evaluated at different env steps "
                         f"({counts}): their mean curve would mix points of different steps")
    return {"steps": np.asarray(next(iter(counts.values()))), "returns": np.asarray([curve[:length] for curve in curves])}
