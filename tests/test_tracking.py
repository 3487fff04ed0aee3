"""Tracking to TensorBoard, CSV and Weights & Biases; videos of evaluation episodes; callbacks."""

import csv
import errno
import os
import re
import shutil
import sys
import warnings

import pytest
from helpers import build_mappo
from mpe2 import simple_spread_v3
from toy_envs import CountingEnv

from marlparts.envs import wrap_env
from marlparts.trainers import SequentialTrainer
from marlparts.trainers.callbacks import Callback, EarlyStopping
from marlparts.utils.tracking import Tracker
from marlparts.utils.video import count_frames


def spread(num_envs=2, **kwargs):
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=5, **kwargs), num_envs=num_envs, seed=0)


def read_scalars(folder):
    with open(folder / "scalars.csv", newline="") as file:
        rows = list(csv.reader(file))
    assert rows[0] == ["step", "tag", "value"]
    table = {}
    for step, tag, value in rows[1:]:
        table.setdefault(tag, []).append((int(step), float(value)))
    return table


def test_every_scalar_goes_to_a_csv_beside_the_event_files(tmp_path):
    env = spread()
    agent = build_mappo(env, rollouts=5, directory=str(tmp_path),
                        cfg={"experiment": {"experiment_name": "run", "write_interval": 5}})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 20, "disable_progressbar": True}).train()
    folder = tmp_path / "run"
    assert list(folder.glob("events.out.tfevents.*"))
    table = read_scalars(folder)
    for tag in ("Episode / return (mean over agents)", "Episode / return / agent_0", "Episode / length",
                "Loss / policy", "Loss / value", "Policy / entropy", "Policy / KL",
                "Learning rate / policy[agent_0+agent_1+agent_2]", "Learning rate / value[agent_0+agent_1+agent_2]",
                "Performance / env steps per second", "Time / acting (ms per step)", "Time / env (ms per step)",
                "Time / storing (ms per step)", "Time / update, logging, checkpoints (ms per step)"):
        assert tag in table, tag
    assert [step for step, _ in table["Loss / policy"]] == [5, 10, 15, 20]
    assert all(value == 5.0 for _, value in table["Episode / length"])
    assert all(value > 0 for _, value in table["Performance / env steps per second"])


def test_teams_each_log_every_teams_return(tmp_path):
    env = wrap_env(lambda: CountingEnv(max_steps=3, leave_at=99), num_envs=2, seed=0)
    pair = build_mappo(env, directory=str(tmp_path), uids=["agent_0", "agent_1"],
                       cfg={"experiment": {"experiment_name": "pair", "write_interval": 3}})
    solo = build_mappo(env, directory=str(tmp_path), uids=["agent_2"], algorithm="ippo",
                       cfg={"experiment": {"experiment_name": "solo", "write_interval": 3}})
    SequentialTrainer(env=env, agents=[pair, solo], cfg={"timesteps": 6, "disable_progressbar": True}).train()
    for name in ("pair", "solo"):
        table = read_scalars(tmp_path / name)
        assert "Episode / team return / MAPPO" in table and "Episode / team return / IPPO" in table
    assert "Episode / return / agent_2" not in read_scalars(tmp_path / "pair")


class BrokenSink:
    name = "broken"

    def scalars(self, values, step):
        raise OSError("disk full")

    def video(self, *args):
        raise OSError("disk full")

    def close(self):
        raise OSError("disk full")


def test_a_failing_logger_never_stops_training_or_its_checkpoints(tmp_path):
    env = spread()
    agent = build_mappo(env, rollouts=5, directory=str(tmp_path),
                        cfg={"experiment": {"experiment_name": "run", "write_interval": 5, "checkpoint_interval": 10}})
    agent.init({"timesteps": 20})
    agent.tracker.sinks.insert(0, BrokenSink())
    with pytest.warns(RuntimeWarning, match="broken logging failed.*disk full"):
        SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 20, "disable_progressbar": True}).train()
    assert agent.timestep == 20
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["agent_10.pt", "agent_20.pt"]
    assert [step for step, _ in read_scalars(tmp_path / "run")["Loss / policy"]] == [5, 10, 15, 20]


def test_weights_and_biases_without_the_package_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    env = spread()
    agent = build_mappo(env, directory=str(tmp_path), cfg={"experiment": {"wandb": True}})
    with pytest.raises(ImportError, match=r"pip install 'marlparts\[wandb\]'"):
        agent.init({"timesteps": 10})


@pytest.mark.parametrize("video_format", ["mp4", "gif"])
def test_evaluation_records_a_video_of_the_first_episode(tmp_path, video_format):
    pytest.importorskip("imageio")
    env = spread(render_mode="rgb_array")
    agent = build_mappo(env, directory=str(tmp_path), cfg={"experiment": {"experiment_name": "run"}})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "video_format": video_format,
                                                            "disable_progressbar": True})
    trainer.train()
    result = trainer.eval(episodes=2, video=True)
    (path,) = result["videos"]
    assert path.endswith(f"run/videos/eval_5.{video_format}")
    if video_format == "mp4":
        assert count_frames(path) == 5 + 1  # the first frame and one per step of the 5-step episode
    else:  # GIF encoders merge identical consecutive frames (agents standing still)
        assert 2 <= count_frames(path) <= 5 + 1


def test_a_video_from_an_env_that_renders_no_frames_is_a_clear_error(tmp_path):
    env = spread()  # render_mode None
    agent = build_mappo(env, directory=str(tmp_path))
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        SequentialTrainer(env=env, agents=agent, cfg={"disable_progressbar": True}).eval(episodes=1, video=True)


class Counting(Callback):
    def __init__(self):
        self.calls = {"step": 0, "episodes": 0, "update": 0, "evaluation": 0, "checkpoint": []}

    def on_step(self, trainer, timestep):
        self.calls["step"] += 1

    def on_episode_end(self, trainer, returns, lengths):
        self.calls["episodes"] += returns.shape[0]
        assert returns.shape[1] == 3 and lengths.tolist() == [5] * returns.shape[0]

    def on_update(self, agent, metrics):
        self.calls["update"] += 1
        assert "Loss / policy" in metrics

    def on_evaluation(self, trainer, result):
        self.calls["evaluation"] += 1

    def on_checkpoint(self, agent, path):
        self.calls["checkpoint"].append(path.rsplit("/", 1)[-1])


def test_callbacks_hear_of_steps_episodes_updates_evaluations_and_checkpoints(tmp_path):
    env = spread()
    agent = build_mappo(env, rollouts=5, directory=str(tmp_path), cfg={"experiment": {"checkpoint_interval": 10}})
    callback = Counting()
    trainer = SequentialTrainer(env=env, agents=agent, callbacks=[callback],
                                cfg={"timesteps": 20, "eval_interval": 10, "eval_episodes": 2, "disable_progressbar": True})
    trainer.train()
    assert callback.calls["step"] == 20 and callback.calls["episodes"] == 4 * 2
    assert callback.calls["update"] == 4 and callback.calls["evaluation"] == 2
    assert "agent_10.pt" in callback.calls["checkpoint"] and "agent_20.pt" in callback.calls["checkpoint"]


def test_early_stopping_ends_training_at_the_evaluation_that_reaches_the_threshold(tmp_path):
    env = spread()
    agent = build_mappo(env, rollouts=5, directory=str(tmp_path))
    stopper = EarlyStopping(threshold=-1e9)  # any return reaches it: stop at the first evaluation
    trainer = SequentialTrainer(env=env, agents=agent, callbacks=[stopper],
                                cfg={"timesteps": 100, "eval_interval": 10, "eval_episodes": 2, "disable_progressbar": True})
    trainer.train()
    assert agent.timestep == 10 and stopper.stopped_at == 10
    with pytest.raises(TypeError, match="Callback"):
        SequentialTrainer(env=env, agents=agent, callbacks=[lambda *args: None])


def test_mixed_precision_on_the_cpu_is_a_noted_no_op(tmp_path):
    env = spread()
    with pytest.warns(RuntimeWarning, match="mixed precision is a CUDA feature"):
        agent = build_mappo(env, rollouts=5, directory=str(tmp_path), cfg={"mixed_precision": True})
    assert agent._grad_scaler is None
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True}).train()


def test_no_step_is_written_twice(tmp_path):
    env = spread()
    agent = build_mappo(env, rollouts=5, directory=str(tmp_path),
                        cfg={"experiment": {"experiment_name": "run", "write_interval": 5}})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 10, "disable_progressbar": True})
    trainer.train()
    trainer.train()
    for tag, rows in read_scalars(tmp_path / "run").items():
        steps = [step for step, _ in rows]
        assert len(steps) == len(set(steps)), (tag, steps)


class DeleteFolderAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_step(self, trainer, timestep):
        if timestep == self.step:
            shutil.rmtree(trainer.agents[0].experiment_dir)


def test_a_folder_deleted_during_the_run_is_reported_by_each_log_writer(tmp_path):
    env = spread()
    agent = build_mappo(env, rollouts=5, directory=str(tmp_path),
                        cfg={"experiment": {"experiment_name": "run", "write_interval": 2}})
    trainer = SequentialTrainer(env=env, agents=agent, callbacks=[DeleteFolderAt(4)],
                                cfg={"timesteps": 10, "disable_progressbar": True})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    folder = str(tmp_path / "run")
    assert any(re.search(rf"CSV logging failed.*{re.escape(folder)}/scalars\.csv was deleted", m) for m in messages), messages
    assert any(re.search(rf"TensorBoard logging failed.*{re.escape(folder)} was deleted", m) for m in messages), messages
    assert agent.timestep == 10 and agent.tracker.sinks == []


def test_a_csv_write_that_finds_the_disk_full_leaves_whole_rows_and_names_the_file(tmp_path, monkeypatch):
    import marlparts.utils.tracking as tracking

    tracker = tracking.Tracker(str(tmp_path), tensorboard=False)
    tracker.write_now({"a": 1.0, "b": 2.0}, 1)
    before = (tmp_path / "scalars.csv").read_bytes()

    def half_then_full(fd, data):
        os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(tracking, "write_all", half_then_full)
    with pytest.warns(RuntimeWarning, match=rf"CSV logging failed.*{re.escape(str(tmp_path / 'scalars.csv'))}.*"
                                            rf"the disk holding {re.escape(str(tmp_path))} is full"):
        tracker.write_now({"a": 3.0, "b": 4.0}, 2)
    assert (tmp_path / "scalars.csv").read_bytes() == before
    assert tracker.sinks == []


def test_a_csv_left_with_an_unfinished_row_is_cut_back_to_its_whole_rows(tmp_path):
    (tmp_path / "scalars.csv").write_bytes(b"step,tag,value\r\n1,a,1.0\r\n2,Time / acting (ms")
    with pytest.warns(RuntimeWarning, match="unfinished row"):
        tracker = Tracker(str(tmp_path), tensorboard=False)
    tracker.write_now({"a": 3.0}, 3)
    tracker.close()
    assert (tmp_path / "scalars.csv").read_bytes() == b"step,tag,value\r\n1,a,1.0\r\n3,a,3.0\r\n"
