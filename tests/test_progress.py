"""Training progress: a bar on a terminal, plain lines every few seconds where output is not one."""

import io

from helpers import build_mappo
from toy_envs import CountingEnv

from marlparts.envs import wrap_env
from marlparts.trainers import SequentialTrainer
from marlparts.trainers.progress import Progress


def train(tmp_path, steps, **cfg):
    env = wrap_env(lambda: CountingEnv(max_steps=4, leave_at=99), num_envs=2, seed=0)
    agent = build_mappo(env, directory=str(tmp_path), cfg={"experiment": {"tensorboard": False}})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": steps, **cfg}).train()


def test_progress_is_written_as_lines_not_redrawn_where_output_is_not_a_terminal(tmp_path, capsys):
    train(tmp_path, 450, progress_interval=3600.0)
    written = capsys.readouterr().err
    assert "\r" not in written  # a redrawn bar would fill a log file with carriage returns
    lines = [line for line in written.splitlines() if line.startswith("step ")]
    assert lines == [lines[-1]] and lines[-1].startswith("step 450/450 (100%), ")  # no interval passed: the last line only
    assert "env_steps_per_s" in lines[-1] and "mean_return" in lines[-1]


def test_progress_lines_come_every_interval_and_not_at_all_when_disabled(tmp_path, capsys):
    train(tmp_path, 30, progress_interval=0.0)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("step ")]
    assert [line.split(" ")[1] for line in lines[:3]] == ["1/30", "2/30", "3/30"] and lines[-1].startswith("step 30/30")
    train(tmp_path, 30, progress_interval=0.0, disable_progressbar=True)
    assert "step " not in capsys.readouterr().err


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_on_a_terminal_progress_is_a_bar():
    stream = Terminal()
    progress = Progress(10, stream=stream)
    progress.set_postfix({"env_steps_per_s": "100"})
    progress.update(10)
    progress.close()
    assert progress.bar is not None and "\r" in stream.getvalue() and "10/10" in stream.getvalue()
