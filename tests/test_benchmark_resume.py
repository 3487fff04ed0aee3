"""The grid runner resumes a run of a resumable cell that was cut short, in its own attempt folder, from its last
checkpoint; other runs, failed attempts and attempts with no checkpoint start again in a new folder.
"""

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from marlparts.benchmark import Grid, run_grid
from marlparts.benchmark.__main__ import main as command_line
from marlparts.benchmark.execution import Outcome
from marlparts.benchmark.runner import interrupted_attempt, run_state, spec_record

TESTS = os.path.dirname(os.path.abspath(__file__))
GRID = {"seeds": [0], "evaluations": 5, "eval_episodes": 2, "timesteps": 32, "cells": [
    {"algorithm": "MAPPO", "environment": "counting", "function": "benchmark_runs:train_resumable",
     "tasks": ["steps3-block8"], "resumable": True}]}


@pytest.fixture
def with_test_helpers(monkeypatch):
    path = os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    return dict(os.environ, PYTHONPATH=path)


def wait_for(path, text, process, seconds=120.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.path.isfile(path) and text in open(path).read():
            return
        if process.poll() is not None:
            raise AssertionError(f"the driver ended ({process.returncode}) before {text!r} was in {path}")
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared in {path}")


def wait_until_the_claim_is_free(run_folder, seconds=30.0):
    """Until no process holds the run's claim (a killed process lets go of it when it has ended)."""
    fcntl = pytest.importorskip("fcntl")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not (run_folder / "claim.json").exists():  # released by its driver
            return
        with open(run_folder / "claim.json") as claim:
            try:
                fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                time.sleep(0.1)
    raise AssertionError(f"the claim of {run_folder} is still held after {seconds} s")


def cut_short_attempt(run_folder, run, *, checkpoint=True):
    attempt = run_folder / "attempt_1"
    (attempt / "work" / "experiment" / "checkpoints").mkdir(parents=True)
    (attempt / "run.json").write_text(json.dumps(spec_record(run)))
    if checkpoint:
        (attempt / "work" / "experiment" / "checkpoints" / "agent_4.pt").write_bytes(b"")
    return attempt


def test_only_an_attempt_of_the_same_run_cut_short_after_a_checkpoint_is_resumed(tmp_path):
    (run,) = Grid.from_dict(GRID).runs()
    attempt = cut_short_attempt(tmp_path, run)
    assert interrupted_attempt(str(tmp_path), run) == str(attempt)
    changed = dataclasses.replace(run, eval_episodes=4)  # the grid was edited since: the curve would mix both
    assert interrupted_attempt(str(tmp_path), changed) is None
    (tmp_path / "failed.json").write_text(json.dumps({"attempt": "attempt_1"}))  # it failed: never resumed
    assert interrupted_attempt(str(tmp_path), run) is None
    (tmp_path / "failed.json").write_text(json.dumps({"attempt": "attempt_0"}))  # an earlier attempt failed
    assert interrupted_attempt(str(tmp_path), run) == str(attempt)
    (tmp_path / "result.json").write_text("{}")
    assert interrupted_attempt(str(tmp_path), run) is None
    assert interrupted_attempt(str(tmp_path / "none_yet"), run) is None
    no_checkpoint = tmp_path / "other"
    cut_short_attempt(no_checkpoint, run, checkpoint=False)
    assert interrupted_attempt(str(no_checkpoint), run) is None
    unrecorded = tmp_path / "unrecorded"
    (cut_short_attempt(unrecorded, run) / "run.json").unlink()
    assert interrupted_attempt(str(unrecorded), run) is None


def start_driver(grid_file, out, environment):
    """The driver in a process group of its own, with Ctrl-C's default handling (a shell that runs the tests in
    the background leaves SIGINT ignored, and children inherit that)."""
    return subprocess.Popen([sys.executable, "-m", "marlparts.benchmark", "run", str(grid_file), "--out", str(out),
                             "--workers", "1"], env=environment, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def driver_blocked_at_step_8(tmp_path, environment):
    """A driver of :data:`GRID` (:func:`start_driver`) whose run is blocked at its evaluation of step 8, its
    checkpoint of that step written. Returns the grid file, the grid folder, the run's folder and the driver."""
    grid_file, out = tmp_path / "grid.json", tmp_path / "out"
    grid_file.write_text(json.dumps(GRID))
    run = out / "runs" / "counting" / "steps3-block8" / "MAPPO" / "seed_0"
    driver = start_driver(grid_file, out, environment)
    try:
        wait_for(str(run / "attempt_1" / "log.txt"), "blocked at step 8", driver)
    except BaseException:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        raise
    return grid_file, out, run, driver


def test_an_interrupted_driver_leaves_its_run_stopped_not_failed_and_it_goes_on(tmp_path, with_test_helpers):
    grid_file, out, run, driver = driver_blocked_at_step_8(tmp_path, with_test_helpers)
    try:
        os.killpg(driver.pid, signal.SIGINT)  # Ctrl-C: the whole process group, the run's process too
        driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    wait_until_the_claim_is_free(run)
    assert not (run / "failed.json").exists()
    lines = []
    assert run_grid(Grid.from_file(str(grid_file)), str(out), workers=1, report=lines.append).done == 1
    assert any("resumed counting/steps3-block8/MAPPO/seed_0 in attempt_1" in line for line in lines), lines


def test_a_run_cut_short_goes_on_in_its_attempt_and_keeps_its_claim_while_its_driver_is_gone(tmp_path,
                                                                                              with_test_helpers):
    """The driver is killed alone (its run holds the claim until it ends), then the run too, as at the end of a
    session; the next driver resumes the run in its attempt folder from its last checkpoint."""
    pytest.importorskip("fcntl")
    grid_file, out, run, driver = driver_blocked_at_step_8(tmp_path, with_test_helpers)
    try:
        driver.kill()  # the driver alone: its run goes on, in the driver's process group
        driver.wait()
        os.killpg(driver.pid, 0)  # the run's process is alive
        lines = []
        progress = run_grid(Grid.from_file(str(grid_file)), str(out), workers=1, report=lines.append)
        assert progress.elsewhere == [os.path.join("counting", "steps3-block8", "MAPPO", "seed_0")]
        assert not any("resumed" in line or "started" in line for line in lines)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
    wait_until_the_claim_is_free(run)  # the run's process ended: the claim went with it
    assert not (run / "result.json").exists() and not (run / "failed.json").exists()  # neither finished nor failed
    lines = []
    progress = run_grid(Grid.from_file(str(grid_file)), str(out), workers=1, report=lines.append)
    assert progress.done == 1 and progress.failed == []
    assert any("resumed counting/steps3-block8/MAPPO/seed_0 in attempt_1" in line for line in lines), lines
    assert sorted(os.listdir(run)) == ["attempt_1", "result.json"]  # no second attempt; the claim released
    result = json.loads((run / "result.json").read_text())
    assert result["attempt"] == "attempt_1"
    assert [point["env_steps"] for point in result["evaluations"]] == [0, 8, 16, 24, 32]
    log = (run / "attempt_1" / "log.txt").read_text()
    assert log.count("$ ") == 2 and "resumed from" in log and "agent_8.pt" in log  # both starts, in one log


@pytest.mark.parametrize("resumable", [False, True])
def test_a_run_that_cannot_go_on_starts_in_a_new_attempt_folder(tmp_path, with_test_helpers, resumable):
    grid = Grid.from_dict({**GRID, "cells": [{**GRID["cells"][0], "function": "benchmark_runs:train",
                                              "tasks": ["steps3"], "resumable": resumable}]})
    run = tmp_path / "runs" / "counting" / "steps3" / "MAPPO" / "seed_0"
    cut_short_attempt(run, grid.runs()[0], checkpoint=not resumable)  # resumable: cut short before a checkpoint
    lines = []
    assert run_grid(grid, str(tmp_path), workers=1, report=lines.append).done == 1
    assert json.loads((run / "result.json").read_text())["attempt"] == "attempt_2"
    assert any("started counting/steps3/MAPPO/seed_0" in line for line in lines)


def test_resumable_must_be_a_boolean_and_gives_scripts_the_resume_option(tmp_path):
    with pytest.raises(ValueError, match=r"grid cell 0 .*'resumable' must be true or false, got 'yes'"):
        Grid.from_dict({**GRID, "cells": [{**GRID["cells"][0], "resumable": "yes"}]}).runs()
    script = tmp_path / "train.py"
    script.write_text("")
    cell = {"algorithm": "A", "environment": "e", "tasks": ["t"], "script": str(script)}
    (plain,) = Grid.from_dict({"timesteps": 10, "seeds": [0], "cells": [cell]}).runs()
    (resuming,) = Grid.from_dict({"timesteps": 10, "seeds": [0], "cells": [{**cell, "resumable": True}]}).runs()
    assert "--resume" not in plain.arguments and resuming.arguments == tuple(plain.arguments) + ("--resume",)
    with pytest.raises(ValueError, match=r"grid cell 0 .*a resumable cell's script goes on .* add \"--resume\""):
        Grid.from_dict({"timesteps": 10, "cells": [{**cell, "resumable": True, "arguments": ["--seed", "{seed}"]}]}).runs()


def test_only_a_stop_signal_makes_a_run_stopped_rather_than_failed():
    assert Outcome(False, -2, signal_number=2).stopped and Outcome(False, -15, signal_number=15).stopped
    assert not Outcome(False, -9, signal_number=9).stopped  # the out-of-memory killer's: a failure
    assert not Outcome(False, -1, error="the driver could not start it").stopped
    assert not Outcome(False, 1).stopped and not Outcome(True, 0).stopped


def test_an_attempt_started_from_another_checkout_of_the_same_scripts_is_the_same_run(tmp_path):
    (run,) = Grid.from_dict(GRID).runs()
    for checkout in ("a", "b"):
        (tmp_path / checkout).mkdir()
        (tmp_path / checkout / "train.py").write_text("")
    in_a, in_b = (dataclasses.replace(run, function=None, script=str(tmp_path / checkout / "train.py"))
                  for checkout in ("a", "b"))
    attempt = cut_short_attempt(tmp_path / "run", in_a)
    assert interrupted_attempt(str(tmp_path / "run"), in_b) == str(attempt)


def test_status_tells_a_run_cut_short_from_one_that_failed(tmp_path, capsys):
    grid_file = tmp_path / "grid.json"
    grid_file.write_text(json.dumps(GRID))
    (run,) = Grid.from_dict(GRID).runs()
    folder = tmp_path / "out" / "runs" / run.key
    assert run_state(str(tmp_path / "out"), run) == "not started"
    cut_short_attempt(folder, run)
    (folder / "failed.json").write_text(json.dumps({"attempt": "attempt_0"}))  # an earlier attempt failed
    assert run_state(str(tmp_path / "out"), run) == "cut short"
    (folder / "failed.json").write_text(json.dumps({"attempt": "attempt_1"}))
    assert command_line(["status", str(grid_file), "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.split() == ["failed", run.key]


def test_status_shows_a_run_whose_claim_names_a_live_process_as_running(tmp_path):
    (run,) = Grid.from_dict(GRID).runs()
    folder = tmp_path / "runs" / run.key
    cut_short_attempt(folder, run)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (folder / "claim.json").write_text(json.dumps({"host": socket.gethostname(), "pid": holder.pid}))
        assert run_state(str(tmp_path), run) == "running"
    finally:
        holder.kill()
        holder.wait()
    assert run_state(str(tmp_path), run) == "cut short"  # its holder is gone
