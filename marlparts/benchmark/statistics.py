"""The field's statistics of a grid's results, through rliable (the library marl-eval builds on).

Per task: the figures EPyMARL's tables report (the best point of the mean learning curve over
seeds, and the mean of that curve over all evaluations) beside the final evaluation's. Over the
tasks of one environment family: IQM, mean, median and optimality gap of the final sampled returns,
each task min-max normalised by the lowest and highest episode return of every evaluation of every run
compared (marl-eval's normalisation), with 95 % stratified bootstrap confidence intervals; and the
probability that one algorithm improves on another. Sample-efficiency curves: the mean over runs at
each evaluation with its bootstrap interval.

Nothing is dropped silently: runs of one task and algorithm that were evaluated on different schedules,
algorithms left out of an environment's aggregates for lack of some of its tasks, and tasks that cannot be
normalised are each listed with the reason.
"""

import dataclasses
from typing import Any, Dict, List, Mapping, Sequence, Set, Tuple

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
    last evaluation) with its ``final_min`` and ``final_max`` over runs, ``runs``, and ``env_steps`` (the step
    of the last evaluation).
    """
    returns = curves["returns"]
    mean_curve = returns.mean(axis=0)
    return {"env_steps": int(curves["steps"][-1]),
            "max_of_mean": float(mean_curve.max()), "max_at_step": int(curves["steps"][int(mean_curve.argmax())]),
            "mean_of_mean": float(mean_curve.mean()), "final": float(returns[:, -1].mean()),
            "final_min": float(returns[:, -1].min()), "final_max": float(returns[:, -1].max()),
            "runs": int(returns.shape[0])}


def per_task_table(data: Mapping[str, Any]) -> Tuple[List[Dict[str, Any]], List[Dict[str, str]]]:
    """One row per environment, task, algorithm and kind of action (``"sampled"``, ``"greedy"``) of marl-eval's
    ``data``, with :func:`task_figures`; and the runs left out, each ``{"environment", "task", "algorithm",
    "actions", "reason"}``: those whose runs were evaluated on different schedules.
    """
    rows, left_out = [], []
    for environment, tasks in data.items():
        for task, algorithms in tasks.items():
            for algorithm in algorithms:
                for actions, metric in METRICS.items():
                    try:
                        curves = learning_curves(data, environment, task, algorithm, metric)
                    except KeyError:
                        continue  # this grid did not evaluate with these actions
                    except ValueError as error:
                        left_out.append({"environment": environment, "task": task, "algorithm": algorithm,
                                         "actions": actions, "reason": str(error)})
                        continue
                    rows.append({"environment": environment, "task": task, "algorithm": algorithm, "actions": actions,
                                 **task_figures(curves)})
    return rows, left_out


@dataclasses.dataclass
class Comparison:
    """The final returns of an environment family's algorithms across its tasks, as rliable takes them.

    Attributes:
        algorithms: the algorithms compared.
        tasks: the tasks they are compared on (every one of them ran each).
        scores: per algorithm, ``(runs, tasks)`` final returns, normalised per task; each algorithm keeps as many
            runs as it has on its task with the fewest (the lowest-numbered).
        left_out: what was not compared, each with a ``"reason"``: an ``"algorithm"`` that lacks some of the
            tasks, a ``"task"`` that cannot be normalised, or a ``"task"`` and ``"algorithm"`` whose runs could
            not be read together.
    """

    algorithms: List[str]
    tasks: List[str]
    scores: Dict[str, np.ndarray]
    left_out: List[Dict[str, str]]


def _widest_comparison(available: Mapping[str, Set[str]]) -> Tuple[List[str], List[str]]:
    """The tasks and algorithms with the most (algorithm, task) pairs where every algorithm ran every task (ties:
    more algorithms, then more tasks, then the first in name order): its algorithms and tasks.

    The best task set for a group of algorithms is the intersection of what they ran, so the candidates are every
    intersection of the algorithms' task sets.
    """
    bases = {frozenset(tasks) for tasks in available.values() if tasks}
    candidates, frontier = set(bases), set(bases)
    while frontier:
        frontier = {tasks & base for tasks in frontier for base in bases if tasks & base} - candidates
        candidates |= frontier
    best: Tuple[Tuple[int, ...], List[str], List[str]] = ((0, 0, 0), [], [])
    for tasks in sorted(candidates, key=sorted):
        covering = sorted(algorithm for algorithm, ran in available.items() if tasks <= ran)
        rank = (len(covering) * len(tasks), len(covering), len(tasks))
        if rank > best[0]:
            best = (rank, covering, sorted(tasks))
    return best[1], best[2]


def normalised_scores(data: Mapping[str, Any], environment: str, metric: str = "episode_return") -> Comparison:
    """The :class:`Comparison` of ``environment``'s final returns of ``metric``.

    The tasks and algorithms compared are those with the most (algorithm, task) pairs (:func:`_widest_comparison`:
    one algorithm that ran a single task does not shrink the others' comparison to that task); each task is
    min-max normalised by the lowest and highest episode return of every evaluation of every run of the task
    that could be read (marl-eval's normalisation: one algorithm's runs are not scored 0 and 1 among themselves),
    and a task on which every episode returned the same is left out. rliable takes as many runs of an
    algorithm on each task: the runs beyond its fewest (the highest-numbered) are left out. Everything left out
    is in ``left_out`` with its reason.

    Raises:
        KeyError: no run of ``environment`` has ``metric``.
    """
    tasks = data[environment]
    available: Dict[str, Set[str]] = {}
    not_evaluated: Dict[str, List[str]] = {}
    unreadable: Dict[str, List[str]] = {}
    curves: Dict[Tuple[str, str], Dict[str, np.ndarray]] = {}
    left_out: List[Dict[str, str]] = []
    missing_metric = None
    for task, per_task in sorted(tasks.items()):
        for algorithm in sorted(per_task):
            available.setdefault(algorithm, set())
            try:
                curves[task, algorithm] = learning_curves(data, environment, task, algorithm, metric)
            except KeyError as error:
                missing_metric = error
                not_evaluated.setdefault(algorithm, []).append(task)
                continue
            except ValueError as error:
                left_out.append({"task": task, "algorithm": algorithm, "reason": str(error)})
                unreadable.setdefault(algorithm, []).append(task)
                continue
            available[algorithm].add(task)
    if not curves and missing_metric is not None:
        raise missing_metric
    algorithms, compared = _widest_comparison(available)
    for algorithm in sorted(set(available) - set(algorithms)) if compared else []:
        lacking = set(compared) - available[algorithm]
        not_evaluated_here = lacking & set(not_evaluated.get(algorithm, []))
        unreadable_here = lacking & set(unreadable.get(algorithm, []))
        groups = [("it has not run", lacking - not_evaluated_here - unreadable_here),
                  ("it was not evaluated with these actions on", not_evaluated_here),
                  ("its runs could not be set together (listed) on", unreadable_here)]
        reasons = [f"{words} {', '.join(sorted(named))}" for words, named in groups if named]
        left_out.append({"algorithm": algorithm, "reason": "; ".join(reasons)})
    for task in sorted(set(tasks) - set(compared)) if compared else []:
        ran = sorted(algorithm for algorithm, names in available.items() if task in names)
        if ran:
            left_out.append({"task": task, "reason": f"not every compared algorithm ran it (only {', '.join(ran)} did)"})
    normalisable, bounds = [], {}
    for task in compared:
        episodes = np.concatenate([np.asarray(step[metric], dtype=float).ravel()
                                   for algorithm in sorted(available) if task in available[algorithm]
                                   for run in tasks[task][algorithm].values()
                                   for key, step in run.items() if key.startswith("step_")])
        low, high = float(episodes.min()), float(episodes.max())
        if high > low:
            normalisable.append(task)
            bounds[task] = (low, high)
        else:
            left_out.append({"task": task, "reason": f"every episode of every run returned {low:g} (the lowest "
                                                     "return is the highest): it cannot be normalised"})
    scores = {}
    for algorithm in algorithms if normalisable else []:
        counts = {task: len(curves[task, algorithm]["runs"]) for task in normalisable}
        fewest = min(normalisable, key=lambda task: counts[task])
        runs = counts[fewest]
        for task in normalisable:
            if counts[task] > runs:
                dropped = ", ".join(curves[task, algorithm]["runs"][runs:])
                left_out.append({"task": task, "algorithm": algorithm, "reason": (
                    f"{dropped} left out of the aggregates: {algorithm} has {runs} runs on {fewest}, and rliable "
                    "takes as many runs of an algorithm on each task")})
        scores[algorithm] = np.stack([(curves[task, algorithm]["returns"][:runs, -1] - bounds[task][0])
                                      / (bounds[task][1] - bounds[task][0]) for task in normalisable], axis=1)
    return Comparison(algorithms=algorithms if normalisable else [], tasks=normalisable, scores=scores,
                      left_out=left_out)


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
    pairs = {(x, y): (scores[x], scores[y]) for x in names for y in names if x != y}  # keyed by the names' tuple
    if not pairs:
        return []
    points, intervals = library.get_interval_estimates(pairs, metrics.probability_of_improvement, reps=repetitions)
    return [{"algorithm": x, "over": y, "value": float(points[(x, y)]), "low": float(np.ravel(intervals[(x, y)])[0]),
             "high": float(np.ravel(intervals[(x, y)])[1])} for x, y in pairs]


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
    """Per environment family: the tasks and algorithms compared (:func:`normalised_scores`), each algorithm's
    runs, what was left out and why, and the aggregates and probabilities of improvement of the final sampled
    returns (greedy ones too where evaluated).
    """
    statistics: Dict[str, Any] = {}
    for environment in data:
        for actions, metric in METRICS.items():
            try:
                comparison = normalised_scores(data, environment, metric)
            except KeyError:
                continue
            if not comparison.tasks:  # nothing to aggregate, but what was left out, and why, is said
                if comparison.left_out:
                    statistics.setdefault(environment, {})[actions] = {
                        "tasks": [], "algorithms": [], "runs": {}, "left_out": comparison.left_out,
                        "aggregates": {}, "probability_of_improvement": []}
                continue
            statistics.setdefault(environment, {})[actions] = {
                "tasks": comparison.tasks, "algorithms": comparison.algorithms,
                "runs": {algorithm: int(scores.shape[0]) for algorithm, scores in comparison.scores.items()},
                "left_out": comparison.left_out,
                "aggregates": aggregate_scores(comparison.scores, repetitions=repetitions),
                "probability_of_improvement": probability_of_improvement(comparison.scores, repetitions=repetitions)}
    return statistics


def mean_curves(data: Mapping[str, Any], environment: str, task: str, algorithms: Sequence[str], metric: str
                ) -> Dict[str, Dict[str, np.ndarray]]:
    """Each algorithm's sample-efficiency curve on one task: ``steps``, ``mean`` and ``interval`` ``(2, evaluations)``."""
    curves = {}
    for algorithm in algorithms:
        try:
            runs = learning_curves(data, environment, task, algorithm, metric)
        except (KeyError, ValueError):  # not evaluated so, or runs on different schedules (the report lists them)
            continue
        mean, interval = curve_intervals(runs["returns"])
        curves[algorithm] = {"steps": runs["steps"], "mean": mean, "interval": interval}
    return curves
