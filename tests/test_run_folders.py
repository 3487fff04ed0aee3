"""Which folder a run writes to: a fresh run never writes into another run's folder, and a run resumed from
an earlier checkpoint never overwrites what its run wrote later.
"""

import os
import re
import warnings

import pytest
from helpers import build_mappo
from toy_envs import CountingEnv

from marlparts.envs import wrap_env
from marlparts.trainers import SequentialTrainer


def counting():
    return wrap_env(lambda: CountingEnv(max_steps=5, leave_at=99), num_envs=1, seed=0)


def agent_of(tmp_path, name="run", **experiment):
    experiment = {"experiment_name": name, "checkpoint_interval": 5, "write_interval": 5, **experiment}
    return build_mappo(counting(), rollouts=5, directory=str(tmp_path), cfg={"experiment": experiment})


def train(agent, steps):
    trainer = SequentialTrainer(env=counting(), agents=agent, cfg={"timesteps": steps, "disable_progressbar": True})
    trainer.train()
    return trainer


def contents(folder):
    """``{relative path: bytes}`` of every file under ``folder``."""
    files = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as file:
                files[os.path.relpath(path, folder)] = file.read()
    return files


def test_a_fresh_run_under_a_used_name_writes_to_a_new_numbered_folder(tmp_path):
    first = agent_of(tmp_path)
    train(first, 10)
    before = contents(tmp_path / "run")
    second = agent_of(tmp_path)
    with pytest.warns(UserWarning, match=rf"{re.escape(str(tmp_path / 'run'))} holds an earlier run.*"
                                         rf"{re.escape(str(tmp_path / 'run_2'))}.*load one of its checkpoints"):
        train(second, 10)
    assert second.experiment_dir == str(tmp_path / "run_2")
    assert contents(tmp_path / "run") == before
    assert sorted(os.listdir(tmp_path / "run_2" / "checkpoints")) == ["agent_10.pt", "agent_5.pt"]
    third = agent_of(tmp_path)
    with pytest.warns(UserWarning, match="run_3"):
        train(third, 1)


def test_an_empty_folder_of_that_name_is_used_as_it_is(tmp_path):
    (tmp_path / "run").mkdir()
    agent = agent_of(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        train(agent, 5)
    assert agent.experiment_dir == str(tmp_path / "run")


@pytest.mark.parametrize("name", ["", "run"])
def test_a_run_resumed_from_an_earlier_checkpoint_branches_into_a_folder_of_its_own(tmp_path, name):
    first = agent_of(tmp_path, name)
    train(first, 20)
    folder = first.experiment_dir
    before = contents(folder)
    resumed = agent_of(tmp_path, name)
    resumed.load(os.path.join(folder, "checkpoints", "agent_10.pt"))
    with pytest.warns(UserWarning, match=rf"{re.escape(folder)} holds files written after step 10 "
                                         r"\(checkpoints/agent_15\.pt, checkpoints/agent_20\.pt\).*"
                                         rf"{re.escape(folder)}_from_10"):
        train(resumed, 10)
    assert resumed.experiment_dir == folder + "_from_10"
    assert contents(folder) == before
    assert sorted(os.listdir(os.path.join(resumed.experiment_dir, "checkpoints"))) == ["agent_15.pt", "agent_20.pt"]


def test_a_run_resumed_from_its_last_checkpoint_goes_on_in_its_folder(tmp_path):
    first = agent_of(tmp_path, "")
    train(first, 10)
    resumed = agent_of(tmp_path, "")
    resumed.load(os.path.join(first.experiment_dir, "checkpoints", "agent_10.pt"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        train(resumed, 10)
    assert resumed.experiment_dir == first.experiment_dir
    assert sorted(os.listdir(os.path.join(first.experiment_dir, "checkpoints"))) == \
        ["agent_10.pt", "agent_15.pt", "agent_20.pt", "agent_5.pt"]


def test_loading_an_earlier_checkpoint_into_a_running_agent_branches_its_writers_too(tmp_path):
    agent = agent_of(tmp_path)
    trainer = train(agent, 20)
    before = contents(tmp_path / "run")
    with pytest.warns(UserWarning, match="after step 10"):
        agent.load(str(tmp_path / "run" / "checkpoints" / "agent_10.pt"))
    assert agent.experiment_dir == str(tmp_path / "run_from_10")
    trainer.train()
    assert contents(tmp_path / "run") == before
    assert sorted(os.listdir(tmp_path / "run_from_10" / "checkpoints")) == \
        ["agent_15.pt", "agent_20.pt", "agent_25.pt", "agent_30.pt"]
    rows = (tmp_path / "run_from_10" / "scalars.csv").read_text().splitlines()[1:]
    assert min(int(row.split(",")[0]) for row in rows) == 15
    second_branch = agent_of(tmp_path)
    second_branch.load(str(tmp_path / "run" / "checkpoints" / "agent_10.pt"))
    with pytest.warns(UserWarning, match="run_from_10_2"):
        train(second_branch, 1)


@pytest.mark.parametrize("video", ["eval_8.gif", "eval_8_against_others.mp4"])
def test_a_later_evaluation_video_counts_as_a_file_of_that_step(tmp_path, video):
    from marlparts.utils.run_folders import files_written_after

    (tmp_path / "videos").mkdir()
    (tmp_path / "videos" / video).write_bytes(b"frames")
    assert files_written_after(str(tmp_path), 4) and not files_written_after(str(tmp_path), 8)
