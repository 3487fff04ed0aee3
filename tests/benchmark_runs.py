"""A run for the benchmark tests, started by the grid runner in a process of its own:
``benchmark_runs:train`` trains MAPPO briefly on CountingEnv (its task names the episode length),
evaluating as the grid asks; the task ``"broken"`` raises after printing a line. ``benchmark_runs:train_resumable``
goes on from the newest checkpoint of its folder, and blocks at one evaluation on its first start.
"""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from helpers import build_mappo  # noqa: E402
from toy_envs import CountingEnv  # noqa: E402

from marlparts.envs import wrap_env  # noqa: E402
from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.trainers.callbacks import Callback  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402
from marlparts.utils.run_folders import newest_checkpoint  # noqa: E402


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


class _BlockAtEvaluation(Callback):
    """Blocks the run at its evaluation of vectorized step ``step``: the test stops the driver there."""

    def __init__(self, step):
        self.step = step

    def on_evaluation(self, trainer, result):
        if result["timestep"] == self.step:
            print("blocked at step", self.step, flush=True)
            time.sleep(600)


def train_resumable(*, task, seed, timesteps, directory, evaluations, eval_episodes):
    """Like :func:`train`, with a checkpoint at every evaluation, going on from the newest checkpoint under
    ``directory``. The task ``steps<n>-block<k>`` has episodes of n steps and, unless it goes on from a
    checkpoint, blocks at its evaluation of vectorized step k.
    """
    torch.set_num_threads(1)
    set_seed(seed)
    length, block = (int(part) for part in task.removeprefix("steps").split("-block"))
    env = wrap_env(lambda: CountingEnv(max_steps=length, leave_at=99), num_envs=2, seed=seed)
    agent = build_mappo(env, directory=directory)
    checkpoint = newest_checkpoint(directory)
    if checkpoint is not None:
        agent.load(checkpoint)
        print("resumed from", os.path.relpath(checkpoint, directory), flush=True)
    steps = timesteps // env.num_envs
    interval = steps // (evaluations - 1)
    trainer = SequentialTrainer(env=env, agents=agent, callbacks=[] if checkpoint else [_BlockAtEvaluation(block)],
                                cfg={"timesteps": interval * (evaluations - 1) - agent.timestep,
                                     "eval_interval": interval, "eval_at_start": True, "checkpoint_at_eval": True,
                                     "eval_episodes": eval_episodes, "team_return": "sum", "disable_progressbar": True})
    trainer.train()
