"""The benchmark runner: grids of runs in processes of their own (local pool, Ray), resumed, reported in
marl-eval's layout with rliable's statistics and figures.
"""

import json
import os

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


def test_a_grid_runs_on_the_local_pool_resumes_and_reports_a_failed_run_with_its_log(tmp_path):
    grid = tiny_grid(tasks=("steps3", "broken", "steps5"))
    lines = []
    progress = run_grid(grid, str(tmp_path), workers=2, report=lines.append)
    assert progress.done == 4 and progress.left == 0 and progress.running == 0
    assert sorted(progress.failed) == [os.path.join("counting", "broken", "MAPPO", f"seed_{seed}") for seed in (0, 1)]
    assert any("left 0" in line for line in lines)
    result = json.loads((tmp_path / "runs" / "counting" / "steps3" / "MAPPO" / "seed_1" / "result.json").read_text())
    assert [point["env_steps"] for point in result["evaluations"]] == [0, 8, 16]
    assert all(len(point["sampled"]["episode_returns"]) == 4 for point in result["evaluations"])
    failure = json.loads((tmp_path / "runs" / "counting" / "broken" / "MAPPO" / "seed_0" / "failed.json").read_text())
    assert "this task always fails" in failure["log_tail"] and failure["returncode"] != 0
    assert os.path.isfile(failure["log"])

    again = []
    second = run_grid(tiny_grid(tasks=("steps3", "steps5")), str(tmp_path), workers=2, report=again.append)
    assert second.done == 4 and second.failed == [] and not any("started" in line for line in again)
    # the finished runs were left as they were: one attempt each
    assert sorted(os.listdir(tmp_path / "runs" / "counting" / "steps5" / "MAPPO" / "seed_0")) == ["attempt_1",
                                                                                                    "result.json"]


def test_a_grid_runs_on_a_local_ray_instance(tmp_path):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}})
    try:
        progress = run_grid(tiny_grid(tasks=("steps3", "broken")), str(tmp_path), ray_address="auto",
                            report=lambda line: None)
    finally:
        ray.shutdown()
    assert progress.done == 2 and len(progress.failed) == 2
    seed_1 = tmp_path / "runs" / "counting" / "steps3" / "MAPPO" / "seed_1"
    assert len(json.loads((seed_1 / "result.json").read_text())["evaluations"]) == 3
    assert "$ " in (seed_1 / "attempt_1" / "log.txt").read_text()  # the log came back from the worker
    failure = json.loads((tmp_path / "runs" / "counting" / "broken" / "MAPPO" / "seed_0" / "failed.json").read_text())
    assert "this task always fails" in failure["log_tail"]


def test_the_report_is_marl_eval_s_layout_with_rliable_intervals_figures_and_a_reference(tmp_path):
    pytest.importorskip("rliable")
    pytest.importorskip("matplotlib")
    run_grid(tiny_grid(seeds=(0, 1, 2)), str(tmp_path), workers=2, report=lambda line: None)
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps({"source": "a test", "budget": {"counting": 160}, "statistics": {
        "max_of_mean": {"label": "Table A", "counting": {"steps3": {"MAPPO": [9.0, 0.5]}}}}}))
    summary = write_report(str(tmp_path), reference=str(reference), repetitions=200)

    data = json.loads((tmp_path / "report" / "marl_eval.json").read_text())
    runs = data["counting"]["steps3"]["MAPPO"]
    assert sorted(runs) == ["run_0", "run_1", "run_2"]
    run = runs["run_2"]
    assert sorted(key for key in run if key.startswith("step_")) == ["step_0", "step_1", "step_2"]
    assert [run[f"step_{i}"]["step_count"] for i in range(3)] == [0, 8, 16]
    for step in ("step_0", "step_2"):
        assert len(run[step]["episode_return"]) == len(run[step]["greedy_episode_return"]) == 4
    assert run["absolute_metrics"]["episode_return"] == run["step_2"]["episode_return"]
    result = json.loads((tmp_path / "runs" / "counting" / "steps3" / "MAPPO" / "seed_2" / "result.json").read_text())
    assert run["step_1"]["episode_return"] == result["evaluations"][1]["sampled"]["episode_returns"]

    curves = learning_curves(data, "counting", "steps3", "MAPPO")
    assert curves["returns"].shape == (3, 3)
    row = next(row for row in summary["tasks"] if row["task"] == "steps3" and row["actions"] == "sampled")
    mean_curve = curves["returns"].mean(axis=0)
    assert row["max_of_mean"] == pytest.approx(mean_curve.max()) and row["mean_of_mean"] == pytest.approx(mean_curve.mean())
    assert row["final"] == pytest.approx(curves["returns"][:, -1].mean())

    aggregates = summary["environments"]["counting"]["sampled"]["aggregates"]["MAPPO"]
    for statistic in ("IQM", "Mean", "Median", "Optimality gap"):
        assert aggregates[statistic]["low"] <= aggregates[statistic]["value"] <= aggregates[statistic]["high"]
    compared = summary["reference"]["comparison"]
    steps3 = next(entry for entry in compared if entry["task"] == "steps3")
    assert steps3["reference_max_of_mean"] == [9.0, 0.5]
    assert steps3["difference_max_of_mean"] == pytest.approx(row["max_of_mean"] - 9.0)
    assert "Table A" in (tmp_path / "report" / "comparison.md").read_text()
    for name in ("curves_counting.png", "aggregates_counting.png"):
        assert (tmp_path / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_probability_of_improvement_favours_the_better_algorithm():
    pytest.importorskip("rliable")
    from marlparts.benchmark.statistics import probability_of_improvement

    scores = {"good": np.array([[0.9, 0.8], [0.95, 0.85], [0.92, 0.9]]),
              "poor": np.array([[0.1, 0.2], [0.15, 0.1], [0.2, 0.05]])}
    pairs = {(pair["algorithm"], pair["over"]): pair for pair in probability_of_improvement(scores, repetitions=200)}
    assert pairs[("good", "poor")]["value"] == pytest.approx(1.0)
    assert pairs[("poor", "good")]["value"] == pytest.approx(0.0)


def test_the_command_line_runs_a_grid_file_and_writes_its_report(tmp_path, capsys):
    pytest.importorskip("rliable")
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"seeds": [0], "evaluations": 2, "eval_episodes": 2, "timesteps": 8, "cells": [
        {"algorithm": "MAPPO", "environment": "counting", "function": "benchmark_runs:train", "tasks": ["steps3"]}]}))
    out = tmp_path / "out"
    assert command_line(["run", str(grid), "--out", str(out), "--workers", "1"]) == 0
    assert command_line(["status", str(grid), "--out", str(out)]) == 0
    assert "finished" in capsys.readouterr().out
    assert command_line(["report", str(out), "--no-figures", "--repetitions", "100"]) == 0
    assert (out / "report" / "marl_eval.json").is_file()


@pytest.mark.parametrize("cell, message", [
    ({"script": "x.py", "function": "a:b"}, "either 'script'"),
    ({"function": "no_colon"}, "module:name"),
    ({"function": "a:b", "timesteps": -3}, "'timesteps' must be a positive int"),
    ({"function": "a:b", "colour": "red"}, "unknown key(s) ['colour']"),
    ({"script": "does/not/exist.py"}, "does not exist"),
])
def test_a_bad_grid_cell_is_an_error_that_names_it(cell, message):
    grid = Grid.from_dict({"timesteps": 10, "cells": [{"algorithm": "A", "environment": "e", "tasks": ["t"], **cell}]})
    with pytest.raises(ValueError, match="grid cell 0 \\(A on e\\)") as error:
        grid.runs()
    assert message in str(error.value)


def test_a_run_held_by_another_live_driver_is_passed_over_and_a_stale_claim_taken_over(tmp_path):
    from marlparts.benchmark.runner import claim, run_folder

    grid = tiny_grid(tasks=("steps3",), seeds=(0, 1))
    held, stale = (run_folder(str(tmp_path), run) for run in grid.runs())
    os.makedirs(held)
    os.makedirs(stale)
    assert claim(held)  # this process holds seed 0, as a second driver would
    with open(os.path.join(stale, "claim.json"), "w") as file:  # seed 1 was held by a process that has gone
        json.dump({"host": __import__("socket").gethostname(), "pid": 2**22 + 12345}, file)
    progress = run_grid(grid, str(tmp_path), workers=2, report=lambda line: None)
    assert progress.elsewhere == [os.path.join("counting", "steps3", "MAPPO", "seed_0")]
    assert progress.done == 1 and not os.path.exists(os.path.join(held, "result.json"))
    assert os.path.exists(os.path.join(stale, "result.json")) and not os.path.exists(os.path.join(stale, "claim.json"))
