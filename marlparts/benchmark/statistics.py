"""The field's statistics of a grid's results, through rliable (the library marl-eval builds on).

Per task: the figures EPyMARL's tables report (the best point of the mean learning curve over
seeds, and the mean of that curve over all evaluations) beside the final evaluation's. Over the
tasks of one environment family: IQM, mean, median and optimality gap of the final sampled returns,
min-max normalised per task over every run of every algorithm (marl-eval's normalisation), with
95 % stratified bootstrap confidence intervals; and the probability that one algorithm improves on
another. Sample-efficiency curves: the mean over runs at each evaluation with its bootstrap interval.
"""

from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from marlparts.benchmark.marl_eval import METRICS, learning_curves

AGGREGATES = ("IQM", "Mean", "Median", "Optimality gap")


def _rliable():
    try:
        from rliable import library, metrics
    except ImportError as error:
        raise ImportError("the benchmark's statistics need rliable: pip install 'marlparts[report]'") from error
    return library, metrics


def task_figures(curves: Mapping[str, np.ndarray]) -> Dict[str, float]:
    """A task's figures from one algorithm's ``curves`` (:func:`~marlparts.benchmark.marl_eval.learning_curves`):
    ``max_of_mean`` (EPyMARL's "maximum return": the best point of the mean curve over runs), ``mean_of_mean``
    (EPyMARL's "average return": that curve's mean over the evaluations), ``final`` (the mean over runs of the
    last evaluation) with its ``final_min`` and ``final_max`` over runs, and ``runs``.
    """
    returns = curves["returns"]
    mean_curve = returns.mean(axis=0)
    return {"max_of_mean": float(mean_curve.max()), "max_at_step": int(curves["steps"][int(mean_curve.argmax())]),
            "mean_of_mean": float(mean_curve.mean()), "final": float(returns[:, -1].mean()),
            "final_min": float(returns[:, -1].min()), "final_max": float(returns[:, -1].max()),
            "runs": int(returns.shape[0])}


def per_task_table(data: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """One row per environment, task, algorithm and kind of action (``"sampled"``, ``"greedy"``) of marl-eval's
    ``data``, with :func:`task_figures`.
    """
    rows = []
    for environment, tasks in data.items():
        for task, algorithms in tasks.items():
            for algorithm in algorithms:
                for actions, metric in METRICS.items():
                    try:
                        curves = learning_curves(data, environment, task, algorithm, metric)
                    except KeyError:
                        continue  # this grid did not evaluate with these actions
                    rows.append({"environment": environment, "task": task, "algorithm": algorithm, "actions": actions,
                                 **task_figures(curves)})
    return rows


def normalised_scores(data: Mapping[str, Any], environment: str, metric: str = "episode_return"
                      ) -> Tuple[Dict[str, np.ndarray], List[str]]:
    """Final returns of ``metric`` as ``{algorithm: (runs, tasks)}``, each task min-max normalised over every run of
    every algorithm, over the tasks that every algorithm of ``environment`` ran (and with as many runs on each,
    the fewest kept), and those tasks' names.
    """
    tasks = data[environment]
    algorithms = sorted({algorithm for per_task in tasks.values() for algorithm in per_task})
    common = sorted(task for task, per_task in tasks.items() if all(algorithm in per_task for algorithm in algorithms))
    finals = {algorithm: [learning_curves(data, environment, task, algorithm, metric)["returns"][:, -1]
                          for task in common] for algorithm in algorithms}
    runs = min(len(values) for per_task in finals.values() for values in per_task) if common else 0
    scores = {}
    for algorithm in algorithms:
        scores[algorithm] = np.stack([values[:runs] for values in finals[algorithm]], axis=1) if common else \
            np.zeros((0, 0))
    for column in range(len(common)):
        everything = np.concatenate([scores[algorithm][:, column] for algorithm in algorithms])
        low, high = everything.min(), everything.max()
        for algorithm in algorithms:
            scores[algorithm][:, column] = (scores[algorithm][:, column] - low) / (high - low) if high > low else 1.0
    return scores, common


def aggregate_scores(scores: Mapping[str, np.ndarray], *, repetitions: int = 2000, seed: int = 0
                     ) -> Dict[str, Dict[str, Dict[str, float]]]:
    """IQM, mean, median and optimality gap of each algorithm's normalised ``scores`` ``(runs, tasks)``, with 95 %
    stratified bootstrap intervals: ``{algorithm: {statistic: {"value", "low", "high"}}}``.
    """
    library, metrics = _rliable()
    np.random.seed(seed)  # rliable's bootstrap draws from NumPy's global generator

    def aggregate(values: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(values), metrics.aggregate_mean(values),
                         metrics.aggregate_median(values), metrics.aggregate_optimality_gap(values)])

    points, intervals = library.get_interval_estimates(dict(scores), aggregate, reps=repetitions)
    return {algorithm: {name: {"value": float(points[algorithm][i]), "low": float(intervals[algorithm][0, i]),
                               "high": float(intervals[algorithm][1, i])} for i, name in enumerate(AGGREGATES)}
            for algorithm in scores}


def probability_of_improvement(scores: Mapping[str, np.ndarray], *, repetitions: int = 2000, seed: int = 0
                               ) -> List[Dict[str, Any]]:
    """For each ordered pair of algorithms ``(x, y)``, the probability that a run of ``x`` scores above one of ``y``
    on a task drawn at random (ties count half), with its 95 % bootstrap interval.
    """
    library, metrics = _rliable()
    np.random.seed(seed)
    names = sorted(scores)
    pairs = {f"{x},{y}": (scores[x], scores[y]) for x in names for y in names if x != y}
    if not pairs:
        return []
    points, intervals = library.get_interval_estimates(pairs, metrics.probability_of_improvement, reps=repetitions)
    return [{"algorithm": pair.split(",")[0], "over": pair.split(",")[1], "value": float(points[pair]),
             "low": float(np.ravel(intervals[pair])[0]), "high": float(np.ravel(intervals[pair])[1])} for pair in pairs]


def curve_intervals(returns: np.ndarray, *, repetitions: int = 1000, seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """The mean over runs of ``returns`` ``(runs, evaluations)`` at each evaluation, and its 95 % bootstrap interval
    ``(2, evaluations)`` (rliable's sample-efficiency estimate, over one task).
    """
    library, metrics = _rliable()
    np.random.seed(seed)
    per_step = {"runs": returns[:, None, :]}  # (runs, tasks=1, evaluations)

    def mean_per_step(values: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_mean(values[..., step]) for step in range(values.shape[-1])])

    points, intervals = library.get_interval_estimates(per_step, mean_per_step, reps=repetitions)
    return points["runs"], intervals["runs"]


def environment_statistics(data: Mapping[str, Any], *, repetitions: int = 2000) -> Dict[str, Any]:
    """Per environment family: the tasks compared, the aggregates and the probabilities of improvement of the
    final sampled returns (greedy ones too where evaluated).
    """
    statistics: Dict[str, Any] = {}
    for environment in data:
        for actions, metric in METRICS.items():
            try:
                scores, tasks = normalised_scores(data, environment, metric)
            except KeyError:
                continue
            if not tasks:
                continue
            statistics.setdefault(environment, {})[actions] = {
                "tasks": tasks, "runs": int(next(iter(scores.values())).shape[0]),
                "aggregates": aggregate_scores(scores, repetitions=repetitions),
                "probability_of_improvement": probability_of_improvement(scores, repetitions=repetitions)}
    return statistics


def mean_curves(data: Mapping[str, Any], environment: str, task: str, algorithms: Sequence[str], metric: str
                ) -> Dict[str, Dict[str, np.ndarray]]:
    """Each algorithm's sample-efficiency curve on one task: ``steps``, ``mean`` and ``interval`` ``(2, evaluations)``."""
    curves = {}
    for algorithm in algorithms:
        try:
            runs = learning_curves(data, environment, task, algorithm, metric)
        except KeyError:
            continue
        mean, interval = curve_intervals(runs["returns"])
        curves[algorithm] = {"steps": runs["steps"], "mean": mean, "interval": interval}
    return curves
