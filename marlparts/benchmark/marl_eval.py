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

from typing import Any, Dict, List, Mapping, Sequence, Tuple

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
        name = f"run_{result['seed']}"
        if name in runs:
            raise ValueError(f"two results of {result['environment']}/{result['task']}/{result['algorithm']} seed "
                             f"{result['seed']}: one run has one result")
        runs[name] = run
    return data


def _step_index(key: str) -> int:
    return int(key.split("_", 1)[1])


def learning_curves(data: Mapping[str, Any], environment: str, task: str, algorithm: str,
                    metric: str = "episode_return") -> Dict[str, np.ndarray]:
    """The runs of one algorithm on one task, read from marl-eval's layout: ``"steps"`` ``(evaluations,)``,
    ``"returns"`` ``(runs, evaluations)``, each run's mean return of ``metric`` at each evaluation, and ``"runs"``,
    the runs' names in that order.

    Raises:
        KeyError: no run has ``metric`` at its first evaluation (the runs were not evaluated so).
        ValueError: some runs have ``metric`` and others not; a run has it at its first evaluation but not at a
            later one, or has an evaluation with no episodes; or the runs were evaluated at different step counts
            (or a different number of times), naming each run's schedule: their mean curve would mix evaluations
            of different steps or drop some.
    """
    runs = data[environment][task][algorithm]
    names = sorted(runs, key=_step_index)
    steps_of = {name: sorted((key for key in runs[name] if key.startswith("step_")), key=_step_index)
                for name in names}
    lacking = [name for name in names if metric not in runs[name][steps_of[name][0]]]
    if len(lacking) == len(names):
        raise KeyError(f"the runs of {algorithm} on {environment}/{task} have no {metric!r} (they have "
                       f"{sorted(runs[names[0]][steps_of[names[0]][0]])})")
    if lacking:
        raise ValueError(f"{environment}/{task}/{algorithm}/{', '.join(lacking)} has no {metric!r} where the other "
                         f"runs have it")
    curves: List[List[float]] = []
    schedules: Dict[str, Tuple[int, ...]] = {}
    for name in names:
        keys = steps_of[name]
        for key in keys:
            if metric not in runs[name][key]:
                raise ValueError(f"{environment}/{task}/{algorithm}/{name} has no {metric!r} at {key}, where its "
                                 f"{keys[0]} has it: its curve has a gap")
            if len(runs[name][key][metric]) == 0:
                raise ValueError(f"{environment}/{task}/{algorithm}/{name} has no episodes of {metric!r} at {key}")
        curves.append([float(np.mean(runs[name][key][metric])) for key in keys])
        schedules[name] = tuple(int(runs[name][key]["step_count"]) for key in keys)
    if len(set(schedules.values())) > 1:
        raise ValueError(f"the runs of {algorithm} on {environment}/{task} were evaluated at different env steps "
                         f"({describe_schedules(schedules)}): their mean curve would mix or drop evaluations")
    return {"steps": np.asarray(next(iter(schedules.values()))), "returns": np.asarray(curves),
            "runs": np.asarray(names)}


def describe_schedules(schedules: Mapping[str, Sequence[int]]) -> str:
    """The evaluation schedules of runs in a few words: each run's number of evaluations and last step, and where
    those agree, the first evaluation whose step differs.
    """
    summaries = {name: f"{len(steps)} evaluations to {steps[-1] if steps else 0} env steps"
                 for name, steps in schedules.items()}
    text = ", ".join(f"{name}: {summary}" for name, summary in summaries.items())
    if len(set(summaries.values())) == 1:
        steps = list(schedules.values())
        first = next(index for index in range(len(steps[0])) if len({run[index] for run in steps}) > 1)
        text += f"; at evaluation {first}: " + ", ".join(f"{name} {run[first]}" for name, run in schedules.items())
    return text
