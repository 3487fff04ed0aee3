"""The benchmark runner: grids of runs in processes of their own (local pool, Ray), resumed, reported in
marl-eval's layout with rliable's statistics and figures.
"""

import json
import os
import re

import numpy as np
import pytest

from marlparts.benchmark import Grid, learning_curves, run_grid, write_report
from marlparts.benchmark.__main__ import main as command_line

TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def _runs_import_the_test_helpers(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])))


def tiny_grid(tasks=("steps3", "steps5"), seeds=(0, 1), **cell):
    return Grid.from_dict({"seeds": list(seeds), "evaluations": 3, "eval_episodes": 4, "timesteps": 16, "cells": [
        {"algorithm": "MAPPO", "environment": "counting", "function": "benchmark_runs:train", "tasks": list(tasks),
         **cell}]})


def test_function_runs_train_for_real_resume_and_a_failed_run_is_reported_with_its_log(tmp_path, capsys):
    grid = tiny_grid(tasks=("steps3", "broken"), seeds=(1,))
    lines = []
    progress = run_grid(grid, str(tmp_path), workers=2, report=lines.append)
    assert progress.done == 1 and progress.left == 0 and progress.running == 0
    assert progress.failed == [os.path.join("counting", "broken", "MAPPO", "seed_1")]
    assert any("left 0" in line for line in lines)
    result = json.loads((tmp_path / "runs" / "counting" / "steps3" / "MAPPO" / "seed_1" / "result.json").read_text())
    assert [point["env_steps"] for point in result["evaluations"]] == [0, 8, 16]
    assert all(len(point["sampled"]["episode_returns"]) == 4 for point in result["evaluations"])
    import marlparts
    assert result["code"]["marlparts"] == marlparts.__version__ and "torch" in result["code"]  # which code ran
    failure = json.loads((tmp_path / "runs" / "counting" / "broken" / "MAPPO" / "seed_1" / "failed.json").read_text())
    assert "this task always fails" in failure["log_tail"] and failure["returncode"] != 0
    assert os.path.isfile(failure["log"])

    again = []
    second = run_grid(tiny_grid(tasks=("steps3",), seeds=(1,)), str(tmp_path), workers=2, report=again.append)
    assert second.done == 1 and second.failed == [] and not any("started" in line for line in again)
    # the finished run was left as it was: one attempt
    assert sorted(os.listdir(tmp_path / "runs" / "counting" / "steps3" / "MAPPO" / "seed_1")) == ["attempt_1",
                                                                                                    "result.json"]
    # the command line on the same grid: nothing left to run, every run listed, the report written
    grid_file = tmp_path / "grid.json"
    grid_file.write_text(json.dumps({"seeds": [1], "evaluations": 3, "eval_episodes": 4, "timesteps": 16, "cells": [
        {"algorithm": "MAPPO", "environment": "counting", "function": "benchmark_runs:train",
         "tasks": ["steps3", "broken"]}]}))
    assert command_line(["status", str(grid_file), "--out", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert listed.count("finished") == 1 and listed.count("failed") == 1
    pytest.importorskip("rliable")
    assert command_line(["report", str(tmp_path), "--no-figures", "--repetitions", "100"]) == 0
    assert (tmp_path / "report" / "marl_eval.json").is_file() and not (tmp_path / "report" / "curves_counting.png").exists()


def test_the_grid_runner_its_ray_task_and_the_report_import_no_pytorch():
    """Each run a Ray worker takes imports the runner's task; the report reads JSON files. Neither needs PyTorch
    (about 2 s to import), which the library's helper modules used to pull in."""
    import subprocess
    import sys

    code = ("import sys, marlparts.benchmark, marlparts.benchmark.__main__, marlparts.benchmark.execution; "
            "print(sorted(name for name in sys.modules if name.split('.')[0] == 'torch')[:3])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


def test_a_grid_runs_on_a_local_ray_instance(tmp_path):
    ray = pytest.importorskip("ray")
    grid = script_grid(tmp_path, ["full", "short"], seeds=(0, 1))  # 2 tasks x 2 seeds; "short" runs fail
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        progress = run_grid(grid, str(tmp_path / "out"), ray_address="auto", report=lambda line: None)
    finally:
        ray.shutdown()
    assert progress.done == 2 and len(progress.failed) == 2
    seed_1 = tmp_path / "out" / "runs" / "toy" / "full" / "Fake" / "seed_1"
    assert [point["sampled"]["mean_return"] for point in json.loads((seed_1 / "result.json").read_text())["evaluations"]] \
        == [1.0, 2.0, 3.0]
    assert "$ " in (seed_1 / "attempt_1" / "log.txt").read_text()  # the log came back from the worker
    failure = json.loads((tmp_path / "out" / "runs" / "toy" / "short" / "Fake" / "seed_0" / "failed.json").read_text())
    assert "where the grid asks for 3 evaluations" in failure["error"]


def write_results(out, curves):
    """Finished runs with the given learning curves: ``{(task, algorithm, seed): [(sampled, greedy) per evaluation]}``,
    each evaluation of 4 episodes spread around the given means, at 0, 100, 200... env steps."""
    for (task, algorithm, seed), points in curves.items():
        folder = out / "runs" / "toy" / task / algorithm / f"seed_{seed}"
        folder.mkdir(parents=True)
        evaluations = [{"timestep": i * 10, "env_steps": i * 100, "episodes": 4,
                        "sampled": {"mean_return": sampled, "episode_returns": [sampled + d for d in (-1, 1, -2, 2)]},
                        "greedy": {"mean_return": greedy, "episode_returns": [greedy] * 4}}
                       for i, (sampled, greedy) in enumerate(points)]
        (folder / "result.json").write_text(json.dumps({"algorithm": algorithm, "environment": "toy", "task": task,
                                                        "seed": seed, "evaluations": evaluations}))


def test_the_report_is_marl_eval_s_layout_with_rliable_intervals_figures_and_a_reference(tmp_path):
    pytest.importorskip("rliable")
    pytest.importorskip("matplotlib")
    curves = {}
    for seed in range(3):
        curves[("easy", "A", seed)] = [(0.0, 0.0), (8.0 + seed, 5.0), (6.0, 4.0)]  # best mean at the middle point
        curves[("easy", "B", seed)] = [(0.0, 0.0), (1.0, 1.0), (2.0 + seed, 1.0)]
        curves[("hard", "A", seed)] = [(0.0, 0.0), (3.0, 1.0), (4.0, 2.0)]
        curves[("hard", "B", seed)] = [(0.0, 0.0), (0.5, 0.0), (1.0 + seed, 0.5)]
    write_results(tmp_path, curves)
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps({"source": "a test", "budget": {"toy": 2000}, "statistics": {
        "max_of_mean": {"label": "Table A", "toy": {"easy": {"A": [9.5, 0.5]}}},
        "mean_of_mean": {"label": "Table B", "toy": {"easy": {"A": [4.0, 0.1]}}}}}))
    summary = write_report(str(tmp_path), reference=str(reference), repetitions=200)

    data = json.loads((tmp_path / "report" / "marl_eval.json").read_text())
    runs = data["toy"]["easy"]["A"]
    assert sorted(runs) == ["run_0", "run_1", "run_2"]
    run = runs["run_2"]
    assert sorted(key for key in run if key.startswith("step_")) == ["step_0", "step_1", "step_2"]
    assert [run[f"step_{i}"]["step_count"] for i in range(3)] == [0, 100, 200]
    assert run["step_1"]["episode_return"] == [9.0, 11.0, 8.0, 12.0] and run["step_1"]["greedy_episode_return"] == [5.0] * 4
    assert run["absolute_metrics"]["episode_return"] == run["step_2"]["episode_return"]
    assert learning_curves(data, "toy", "easy", "A")["returns"].tolist() == [[0, 8, 6], [0, 9, 6], [0, 10, 6]]

    rows = {(row["task"], row["algorithm"], row["actions"]): row for row in summary["tasks"]}
    easy_a = rows[("easy", "A", "sampled")]
    assert easy_a["max_of_mean"] == pytest.approx(9.0) and easy_a["max_at_step"] == 100  # the best point, not the last
    assert easy_a["mean_of_mean"] == pytest.approx(5.0) and easy_a["final"] == pytest.approx(6.0)
    assert rows[("easy", "B", "sampled")]["final_min"] == 2.0 and rows[("easy", "B", "sampled")]["final_max"] == 4.0
    assert rows[("easy", "A", "greedy")]["max_of_mean"] == pytest.approx(5.0)

    statistics = summary["environments"]["toy"]["sampled"]
    assert statistics["tasks"] == ["easy", "hard"] and statistics["runs"] == {"A": 3, "B": 3}
    for algorithm in ("A", "B"):
        for name in ("IQM", "Mean", "Median", "Optimality gap"):
            figures = statistics["aggregates"][algorithm][name]
            assert figures["low"] <= figures["value"] <= figures["high"]
    assert statistics["aggregates"]["A"]["Mean"]["value"] > statistics["aggregates"]["B"]["Mean"]["value"]
    improvement = {(pair["algorithm"], pair["over"]): pair["value"] for pair in statistics["probability_of_improvement"]}
    assert improvement[("A", "B")] > 0.5 > improvement[("B", "A")]

    easy = next(entry for entry in summary["reference"]["comparison"] if entry["task"] == "easy" and entry["algorithm"] == "A")
    assert easy["reference_max_of_mean"] == [9.5, 0.5] and easy["difference_max_of_mean"] == pytest.approx(-0.5)
    assert easy["difference_mean_of_mean"] == pytest.approx(1.0)
    table = (tmp_path / "report" / "comparison.md").read_text()
    assert "Table A" in table and "| toy | easy | A | 3 | 200 / 2k |" in table
    for name in ("curves_toy.png", "aggregates_toy.png", "improvement_toy.png"):
        assert (tmp_path / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_probability_of_improvement_favours_the_better_algorithm():
    pytest.importorskip("rliable")
    from marlparts.benchmark.statistics import probability_of_improvement

    scores = {"good": np.array([[0.9, 0.8], [0.95, 0.85], [0.92, 0.9]]),
              "poor": np.array([[0.1, 0.2], [0.15, 0.1], [0.2, 0.05]])}
    pairs = {(pair["algorithm"], pair["over"]): pair for pair in probability_of_improvement(scores, repetitions=200)}
    assert pairs[("good", "poor")]["value"] == pytest.approx(1.0)
    assert pairs[("poor", "good")]["value"] == pytest.approx(0.0)


@pytest.mark.parametrize("cell, message", [
    ({"script": "x.py", "function": "a:b"}, "either 'script'"),
    ({"function": "no_colon"}, "module:name"),
    ({"function": "a:b", "timesteps": -3}, "'timesteps' must be a positive int"),
    ({"function": "a:b", "colour": "red"}, "unknown key(s) ['colour']"),
    ({"script": "does/not/exist.py"}, "does not exist"),
    ({"function": "a:b", "arguments": "--seed {seed}"}, "must be a list of strings"),
    ({"function": "a:b", "arguments": ["--lr", "{learning_rate}"]}, "names 'learning_rate'"),
])
def test_a_bad_grid_cell_is_an_error_that_names_it(cell, message):
    grid = Grid.from_dict({"timesteps": 10, "cells": [{"algorithm": "A", "environment": "e", "tasks": ["t"], **cell}]})
    with pytest.raises(ValueError, match="grid cell 0 \\(A on e\\)") as error:
        grid.runs()
    assert message in str(error.value)


def test_a_run_held_by_another_live_driver_is_passed_over_and_a_stale_claim_taken_over(tmp_path):
    from marlparts.benchmark.runner import claim, release, run_folder

    grid = script_grid(tmp_path, ["full"], seeds=(0, 1))
    out = str(tmp_path / "out")
    held, stale = (run_folder(out, run) for run in grid.runs())
    os.makedirs(held)
    os.makedirs(stale)
    assert claim(held)  # this process holds seed 0, as a second driver would
    with open(os.path.join(stale, "claim.json"), "w") as file:  # seed 1 was held by a driver that was killed
        json.dump({"host": __import__("socket").gethostname(), "pid": 2**22 + 12345}, file)
    try:
        progress = run_grid(grid, out, workers=2, report=lambda line: None)
    finally:
        release(held)
    assert progress.elsewhere == [os.path.join("toy", "full", "Fake", "seed_0")]
    assert progress.done == 1 and not os.path.exists(os.path.join(held, "result.json"))
    assert os.path.exists(os.path.join(stale, "result.json")) and not os.path.exists(os.path.join(stale, "claim.json"))


FAKE_SCRIPT = """
import argparse, json, os
parser = argparse.ArgumentParser()
for name in ("--env", "--seed", "--timesteps", "--directory", "--evaluations", "--episodes"):
    parser.add_argument(name)
args = parser.parse_args()
points = int(args.evaluations) - (1 if args.env == "short" else 0)
os.makedirs(os.path.join(args.directory, "experiment"))
with open(os.path.join(args.directory, "experiment", "evaluations.jsonl"), "w") as file:
    for i in range(points):
        returns = [float(i + int(args.seed))] * int(args.episodes)
        file.write(json.dumps({"timestep": i, "env_steps": i * 10, "episodes": int(args.episodes),
                               "sampled": {"mean_return": returns[0], "episode_returns": returns},
                               "greedy": {"mean_return": returns[0], "episode_returns": returns}}) + "\\n")
"""


def script_grid(tmp_path, tasks, timesteps=30, seeds=(0,)):
    (tmp_path / "scripts").mkdir(exist_ok=True)
    (tmp_path / "scripts" / "fake.py").write_text(FAKE_SCRIPT)
    return Grid.from_dict({"seeds": list(seeds), "evaluations": 3, "eval_episodes": 2, "timesteps": timesteps, "cells": [
        {"algorithm": "Fake", "environment": "toy", "script": "scripts/fake.py", "tasks": list(tasks)}]},
        base=str(tmp_path))


def test_a_grid_of_2_tasks_x_2_seeds_on_the_local_pool_in_a_relative_folder_checks_curves_and_settings(tmp_path,
                                                                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)
    progress = run_grid(script_grid(tmp_path, ["full", "short"], seeds=(0, 1)), "results", workers=2,
                        report=lambda line: None)
    assert progress.done == 2 and len(progress.failed) == 2  # the scripts run in their own folder; results land here
    result = json.loads((tmp_path / "results" / "runs" / "toy" / "full" / "Fake" / "seed_0" / "result.json").read_text())
    assert [point["env_steps"] for point in result["evaluations"]] == [0, 10, 20]
    failure = json.loads((tmp_path / "results" / "runs" / "toy" / "short" / "Fake" / "seed_0" / "failed.json").read_text())
    assert "where the grid asks for 3 evaluations" in failure["error"]  # a curve that would not line up is refused

    again = run_grid(script_grid(tmp_path, ["full"], seeds=(0, 1)), "results", report=lambda line: None)
    assert again.done == 2 and again.running == 0 and again.failed == []  # finished runs are not run again
    with pytest.raises(ValueError, match="other settings than the grid's") as error:
        run_grid(script_grid(tmp_path, ["full"], timesteps=60), "results", report=lambda line: None)
    assert "toy/full/Fake/seed_0: timesteps 30 (the grid now: 60)" in str(error.value).replace(os.sep, "/")


def test_runs_evaluated_at_different_steps_are_not_averaged():
    data = {"toy": {"task": {"A": {
        "run_0": {"step_0": {"step_count": 0, "episode_return": [1.0]}, "step_1": {"step_count": 10, "episode_return": [2.0]}},
        "run_1": {"step_0": {"step_count": 0, "episode_return": [1.0]}, "step_1": {"step_count": 20, "episode_return": [3.0]}},
    }}}}
    with pytest.raises(ValueError, match="evaluated at different env steps"):
        learning_curves(data, "toy", "task", "A")


def test_epymarl_code_runs_are_read_from_sacred_folders_beside_the_grid_s_runs(tmp_path, monkeypatch):
    import importlib.util
    import sys

    path = os.path.join(os.path.dirname(TESTS), "benchmarks", "epymarl", "epymarl_code_runs.py")
    spec = importlib.util.spec_from_file_location("epymarl_code_runs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = tmp_path / "sacred" / "3"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"name": "ia2c", "seed": 4, "t_max": 100, "test_interval": 50,
                                                  "env_args": {"key": "lbforaging:Foraging-8x8-2p-2f-coop-v3"}}))
    values = [{"py/object": "numpy.float64", "dtype": "float64", "value": value} for value in (0.0, 0.5, 0.7)]
    (run / "info.json").write_text(json.dumps({"test_return_mean": values, "test_return_mean_T": [0, 50, 100]}))
    ours = tmp_path / "grid" / "runs" / "lbf" / "Foraging-8x8-2p-2f-coop-v3" / "IA2C" / "seed_0"
    ours.mkdir(parents=True)
    (ours / "result.json").write_text(json.dumps({
        "environment": "lbf", "task": "Foraging-8x8-2p-2f-coop-v3", "algorithm": "IA2C", "seed": 0, "evaluations": [
        {"env_steps": step, "sampled": {"mean_return": value}} for step, value in ((0, 0.1), (50, 0.9), (100, 0.8))]}))
    output = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["epymarl_code_runs.py", str(run), "--grid", str(tmp_path / "grid"),
                                      "--output", str(output)])
    module.main()
    (entry,) = json.loads(output.read_text())
    assert (entry["algorithm"], entry["task"]) == ("IA2C", "Foraging-8x8-2p-2f-coop-v3")
    (theirs,) = entry["epymarl_code"]
    assert theirs["seed"] == 4 and theirs["sampled"] == [0.0, 0.5, 0.7] and theirs["maximum"] == 0.7
    assert abs(theirs["average"] - 0.4) < 1e-12
    (mine,) = entry["marlparts"]
    assert mine["maximum"] == 0.9 and abs(mine["average"] - 0.6) < 1e-12


def test_a_run_with_fewer_evaluations_is_not_cut_to_the_shortest():
    """Three evaluations against five: the mean curve would describe a shorter run than the others silently."""
    def run(evaluations):
        return {f"step_{i}": {"step_count": 100 * i, "episode_return": [float(i)]} for i in range(evaluations)}
    data = {"toy": {"task": {"A": {"run_0": run(3), "run_1": run(5), "run_2": run(5)}}}}
    with pytest.raises(ValueError, match=r"run_0: 3 evaluations to 200 env steps, run_1: 5 evaluations to 400"):
        learning_curves(data, "toy", "task", "A")


def test_the_report_leaves_out_runs_that_do_not_match_says_why_and_keeps_the_rest(tmp_path):
    """A task whose runs were evaluated on other schedules is left out of the table and the statistics, with its
    reason, and the other tasks are reported; the steps column is the curve's own last step."""
    pytest.importorskip("rliable")
    curves = {}
    for seed in range(2):
        curves[("good", "A", seed)] = [(0.0, 0.0), (2.0, 1.0), (4.0 + seed, 2.0)]
        curves[("good", "B", seed)] = [(0.0, 0.0), (1.0, 1.0), (2.0 + seed, 1.0)]
        curves[("mixed", "B", seed)] = [(0.0, 0.0), (1.0, 1.0), (2.0, 1.0)]
    curves[("mixed", "A", 0)] = [(0.0, 0.0), (2.0, 1.0), (4.0, 2.0)]
    curves[("mixed", "A", 1)] = [(0.0, 0.0), (2.0, 1.0), (4.0, 2.0), (5.0, 2.0), (6.0, 2.0)]  # a longer run
    write_results(tmp_path, curves)
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps({"source": "a test", "statistics": {"max_of_mean": {"toy": {}}}}))
    summary = write_report(str(tmp_path), reference=str(reference), repetitions=50, figures=False)

    rows = {(row["task"], row["algorithm"], row["actions"]) for row in summary["tasks"]}
    assert ("good", "A", "sampled") in rows and ("mixed", "B", "sampled") in rows
    assert ("mixed", "A", "sampled") not in rows and ("mixed", "A", "greedy") not in rows
    (left_out,) = [entry for entry in summary["left_out"] if entry["task"] == "mixed" and entry["actions"] == "sampled"]
    assert left_out["algorithm"] == "A" and "2 evaluations to 200 env steps" not in left_out["reason"]
    assert "3 evaluations to 200 env steps" in left_out["reason"] and "5 evaluations to 400" in left_out["reason"]
    assert summary["environments"]["toy"]["sampled"]["tasks"] == ["good"]  # "mixed" has no comparable A
    table = (tmp_path / "report" / "comparison.md").read_text()
    assert "| toy | good | A | 2 | 200 / ? |" in table and "| toy | mixed | A |" not in table


def test_scores_are_normalised_by_every_episode_of_the_task_and_a_constant_task_is_left_out(tmp_path):
    """marl-eval's normalisation: each task by the lowest and highest episode return of every evaluation of every
    run compared, so that one algorithm's runs are not scored 0 and 1 among themselves; a task on which every
    episode returned the same cannot be normalised and is left out of the aggregates, not scored 1."""
    pytest.importorskip("rliable")
    from marlparts.benchmark.statistics import normalised_scores

    def run(finals):
        return {f"step_{i}": {"step_count": 100 * i, "episode_return": values} for i, values in enumerate(finals)}
    data = {"toy": {
        "spread": {"A": {"run_0": run([[0.0, 2.0], [90.0, 110.0]]), "run_1": run([[0.0, 0.0], [98.0, 104.0]])}},
        "dead": {"A": {"run_0": run([[0.0, 0.0], [0.0, 0.0]]), "run_1": run([[0.0, 0.0], [0.0, 0.0]])}}}}
    comparison = normalised_scores(data, "toy")
    assert comparison.tasks == ["spread"] and comparison.algorithms == ["A"]
    assert comparison.scores["A"][:, 0] == pytest.approx([100.0 / 110.0, 101.0 / 110.0])
    assert comparison.left_out == [{"task": "dead", "reason": "every episode of every run returned 0 (the lowest "
                                                              "return is the highest): it cannot be normalised"}]


def test_an_algorithm_that_ran_few_tasks_does_not_shrink_the_others_aggregates():
    """Aggregates compare the set of tasks and algorithms with the most (algorithm, task) pairs; an algorithm that
    lacks some of those tasks is left out of them, named, and each algorithm keeps all its runs."""
    pytest.importorskip("rliable")
    from marlparts.benchmark.statistics import normalised_scores

    def runs(count, level):
        return {f"run_{seed}": {"step_0": {"step_count": 0, "episode_return": [0.0]},
                                "step_1": {"step_count": 100, "episode_return": [level + seed]}}
                for seed in range(count)}
    data = {"toy": {task: {"A": runs(3, 5.0), "B": runs(2, 1.0)} for task in ("t1", "t2", "t3")}}
    data["toy"]["t1"]["Z"] = runs(1, 9.0)
    comparison = normalised_scores(data, "toy")
    assert comparison.tasks == ["t1", "t2", "t3"] and comparison.algorithms == ["A", "B"]
    assert comparison.scores["A"].shape == (3, 3) and comparison.scores["B"].shape == (2, 3)
    assert comparison.left_out == [{"algorithm": "Z", "reason": "it has not run t2, t3"}]


@pytest.mark.parametrize("later_step, message", [({"step_count": 100}, r"run_1 has no 'episode_return' at step_1"),
                                                 ({"step_count": 100, "episode_return": []},
                                                  r"run_1 has no episodes of 'episode_return' at step_1")])
def test_a_run_whose_later_evaluation_lacks_the_metric_is_a_clear_error_not_a_missing_kind(later_step, message):
    """A run evaluated with these actions at first but not at a later evaluation (or with no episodes there) is
    named, not taken for a grid that never evaluated so (which the report skips quietly) nor averaged to NaN."""
    def run(second):
        return {"step_0": {"step_count": 0, "episode_return": [1.0]}, "step_1": second}
    data = {"toy": {"task": {"A": {"run_0": run({"step_count": 100, "episode_return": [2.0]}),
                                   "run_1": run(later_step)}}}}
    with pytest.raises(ValueError, match=message):
        learning_curves(data, "toy", "task", "A")


def _runs_of(levels, metric="episode_return"):
    """marl-eval runs, one per final level, evaluated at 0 and 100 env steps."""
    return {f"run_{seed}": {"step_0": {"step_count": 0, metric: [0.0]}, "step_1": {"step_count": 100, metric: [level]}}
            for seed, level in enumerate(levels)}


@pytest.mark.parametrize("ran, algorithms, tasks", [
    ({"A": ["t1", "t2", "t3"], "B": ["t1", "t2", "t4"], "C": ["t1", "t5"]}, ["A", "B"], ["t1", "t2"]),
    ({"A": ["t1", "t2"], "B": ["t1", "t3"]}, ["A", "B"], ["t1"]),  # a tie of pairs: more algorithms
])
def test_the_aggregates_compare_the_shared_tasks_with_the_most_algorithm_task_pairs(ran, algorithms, tasks):
    """The widest comparison is often the tasks some algorithms share, which need not be any one's whole list."""
    pytest.importorskip("rliable")
    from marlparts.benchmark.statistics import normalised_scores

    data = {"toy": {}}
    for algorithm, names in ran.items():
        for task in names:
            data["toy"].setdefault(task, {})[algorithm] = _runs_of([1.0, 2.0])
    comparison = normalised_scores(data, "toy")
    assert comparison.algorithms == algorithms and comparison.tasks == tasks


def test_every_task_algorithm_and_run_the_aggregates_leave_out_is_named_with_its_own_reason():
    """Tasks outside the comparison, an algorithm not evaluated with these actions (not 'not run'), runs beyond an
    algorithm's fewest on a task, and a run without the metric among runs with it: each listed."""
    pytest.importorskip("rliable")
    from marlparts.benchmark.statistics import normalised_scores

    data = {"toy": {"t1": {"A": _runs_of([1.0, 2.0, 3.0]), "B": _runs_of([1.0, 2.0]), "C": _runs_of([1.0])},
                    "t2": {"A": _runs_of([1.0, 2.0]), "B": _runs_of([2.0, 3.0]),
                           "C": _runs_of([1.0], metric="greedy_episode_return")},
                    "t3": {"A": _runs_of([1.0]), "D": _runs_of([1.0, 2.0])}}}
    data["toy"]["t3"]["D"]["run_1"]["step_0"] = {"step_count": 0, "greedy_episode_return": [0.0]}
    data["toy"]["t3"]["D"]["run_1"]["step_1"] = {"step_count": 100, "greedy_episode_return": [0.0]}
    comparison = normalised_scores(data, "toy")
    assert comparison.algorithms == ["A", "B"] and comparison.tasks == ["t1", "t2"]
    reasons = {(entry.get("task"), entry.get("algorithm")): entry["reason"] for entry in comparison.left_out}
    assert "run_1 has no 'episode_return'" in reasons[("t3", "D")]
    assert reasons[(None, "C")] == "it was not evaluated with these actions on t2"
    assert reasons[("t3", None)] == "not every compared algorithm ran it (only A did)"
    assert reasons[("t1", "A")].startswith("run_2 left out of the aggregates: A has 2 runs on t2")
    assert reasons[(None, "D")] == "it has not run t1, t2"
    assert comparison.scores["A"].shape == (2, 2) and len(reasons) == 5


def test_an_environment_whose_tasks_cannot_be_normalised_still_says_why():
    pytest.importorskip("rliable")
    from marlparts.benchmark.statistics import environment_statistics

    data = {"toy": {"t1": {"A": _runs_of([0.0, 0.0]), "B": _runs_of([0.0])}}}
    statistics = environment_statistics(data, repetitions=20)["toy"]["sampled"]
    assert statistics["tasks"] == [] and statistics["aggregates"] == {}
    assert "cannot be normalised" in statistics["left_out"][0]["reason"]


def test_the_probability_of_improvement_keeps_every_pair_apart_whatever_the_names():
    """Each ordered pair keeps its own entry and names even when a name holds a comma (``"A"`` over ``"B,C"`` and
    ``"A,B"`` over ``"C"`` are two pairs, not one key ``"A,B,C"``)."""
    pytest.importorskip("rliable")
    from marlparts.benchmark.statistics import probability_of_improvement

    levels = {"A": 0.1, "A,B": 0.9, "B,C": 0.5, "C": 0.3}
    scores = {name: np.full((3, 2), level) + np.arange(3)[:, None] * 0.01 for name, level in levels.items()}
    pairs = [(pair["algorithm"], pair["over"], pair["value"]) for pair in probability_of_improvement(scores,
                                                                                                   repetitions=50)]
    assert len(pairs) == 12 and len({(x, y) for x, y, _ in pairs}) == 12
    for x, y, value in pairs:
        assert value == pytest.approx(1.0 if levels[x] > levels[y] else 0.0), (x, y)


@pytest.mark.parametrize("field", ["algorithm", "environment", "tasks"])
@pytest.mark.parametrize("name", ["A,B", "a/b", "..", "", ".hidden", "task.", "task "])
def test_a_grid_name_that_cannot_be_a_folder_or_a_marl_eval_key_is_refused(field, name):
    """Names become folders (``runs/<environment>/<task>/<algorithm>``) and marl-eval keys, which refuse commas."""
    cell = {"algorithm": "A", "environment": "e", "tasks": ["t"], "function": "a:b",
            field: [name] if field == "tasks" else name}
    grid = Grid.from_dict({"timesteps": 10, "cells": [cell]})
    named = f"{'task' if field == 'tasks' else field} {re.escape(repr(name))}"
    with pytest.raises(ValueError, match=named if name or field == "tasks" else f"'{field}' is missing"):
        grid.runs()


def test_the_report_reads_one_result_per_run_folder_and_refuses_one_filed_under_another_run(tmp_path):
    """Only ``runs/<environment>/<task>/<algorithm>/seed_<seed>/result.json`` is a run's result: a stale copy of a
    run's folder or a file that a script wrote below its attempt is not counted again, and a result whose fields
    name another run than its folder is an error, not a second seed."""
    pytest.importorskip("rliable")
    curves = {("easy", "A", 0): [(0.0, 0.0), (10.0, 1.0)], ("easy", "A", 1): [(0.0, 0.0), (20.0, 1.0)]}
    write_results(tmp_path, curves)
    runs = tmp_path / "runs" / "toy" / "easy" / "A"
    stale = json.loads((runs / "seed_0" / "result.json").read_text())
    stale["evaluations"][-1]["sampled"]["episode_returns"] = [2.0] * 4
    (runs / "seed_0.old").mkdir()
    (runs / "seed_0.old" / "result.json").write_text(json.dumps(stale))
    (runs / "seed_1" / "attempt_1" / "work").mkdir(parents=True)
    (runs / "seed_1" / "attempt_1" / "work" / "result.json").write_text(json.dumps(stale))
    summary = write_report(str(tmp_path), repetitions=20, figures=False)
    (row,) = [row for row in summary["tasks"] if row["actions"] == "sampled"]
    assert row["runs"] == 2 and row["final"] == pytest.approx(15.0) and row["final_min"] == pytest.approx(10.0)

    misfiled = dict(stale, seed=1)
    (runs / "seed_0" / "result.json").write_text(json.dumps(misfiled))
    with pytest.raises(ValueError, match=r"seed_0.*names the run toy/easy/A/seed_1"):
        write_report(str(tmp_path), repetitions=20, figures=False)


def test_marl_eval_s_layout_refuses_two_results_of_one_run():
    from marlparts.benchmark.marl_eval import to_marl_eval

    result = {"environment": "toy", "task": "easy", "algorithm": "A", "seed": 0,
              "evaluations": [{"env_steps": 0, "sampled": {"episode_returns": [1.0]}}]}
    with pytest.raises(ValueError, match="two results of toy/easy/A seed 0"):
        to_marl_eval([result, dict(result)])


def test_a_reference_with_only_some_statistics_draws_its_figures(tmp_path):
    """A reference file may give any of the statistics (``load_reference`` accepts ``mean_of_mean`` alone); the
    figures then go without its lines rather than failing after half the report is written."""
    pytest.importorskip("rliable")
    pytest.importorskip("matplotlib")
    write_results(tmp_path, {("easy", "A", seed): [(0.0, 0.0), (1.0 + seed, 1.0)] for seed in range(2)})
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps({"source": "a test", "statistics": {
        "mean_of_mean": {"label": "Table B", "toy": {"easy": {"A": [4.0, 0.1]}}}}}))
    summary = write_report(str(tmp_path), reference=str(reference), repetitions=20)
    assert "curves_toy.png" in summary["files"] and (tmp_path / "report" / "summary.json").is_file()


def test_the_curves_legend_names_every_algorithm_drawn_in_any_panel(tmp_path, monkeypatch):
    pytest.importorskip("rliable")
    pytest.importorskip("matplotlib")
    from marlparts.benchmark import figures

    def runs(level):
        return {f"run_{seed}": {"step_0": {"step_count": 0, "episode_return": [0.0]},
                                "step_1": {"step_count": 100, "episode_return": [level + seed]}} for seed in range(2)}
    data = {"toy": {"t1": {"A": runs(1.0)}, "t2": {"A": runs(1.0), "B": runs(2.0)}}}
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda figure, path: drawn.append(figure) or path)
    figures.learning_curve_figure(data, "toy", str(tmp_path / "curves.png"))
    (legend,) = drawn[0].legends
    assert sorted(text.get_text() for text in legend.get_texts()) == ["A (sampled)", "B (sampled)"]
