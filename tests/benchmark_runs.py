"""A run for the benchmark tests, started by the grid runner in a process of its own:
``benchmark_runs:train`` trains MAPPO briefly on CountingEnv (its task names the episode length),
evaluating as the grid asks; the task ``"broken"`` raises after printing a line.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from helpers import build_mappo  # noqa: E402
from toy_envs import CountingEnv  # noqa: E402

from marlparts.envs import wrap_env  # noqa: E402
from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402


def train(*, task, seed, timesteps, directory, evaluations, eval_episodes):
    """Train on CountingEnv with ``task`` = ``"steps<n>"`` (n steps per episode), evaluating ``evaluations`` times."""
    if task == "broken":
        print("the broken task starts, then fails")
        raise RuntimeError("this task always fails")
    torch.set_num_threads(1)
    set_seed(seed)
    env = wrap_env(lambda: CountingEnv(max_steps=int(task.removeprefix("steps")), leave_at=99), num_envs=2, seed=seed)
    agent = build_mappo(env, directory=directory)
    steps = timesteps // env.num_envs
    interval = steps // (evaluations - 1)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={
        "timesteps": interval * (evaluations - 1), "eval_interval": interval, "eval_at_start": True,
        "eval_episodes": eval_episodes, "team_return": "sum", "disable_progressbar": True})
    trainer.train()
