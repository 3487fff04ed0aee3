"""Seconds per vectorized step of MAPPO training (64 copies of simple_spread, the example's configuration)
with whatever marlparts is importable, so that two versions can be timed against each other:

    git worktree add /tmp/before <commit>
    for round in 1 2 3 4; do
        PYTHONPATH=/tmp/before python benchmarks/training_rate.py 200
        python benchmarks/training_rate.py 200
    done

Only public API that every version has is used. Prints the seconds per vectorized step of
``steps`` training steps (after a 50-step warm-up).
"""

import sys
import time

import torch
from mpe2 import simple_spread_v3

from marlparts.agents import MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, mlp
from marlparts.resources import RunningStandardScaler
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed


class Policy(CategoricalMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(64, 64), output_gain=0.01)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(64, 64))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def main() -> None:
    torch.set_num_threads(1)
    set_seed(0)
    env = wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25, local_ratio=0.5), num_envs=64, seed=0,
                   state_source="observations")
    uid = env.possible_agents[0]
    policy = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    value = Value(observation_space=env.state_space, output_size=env.num_agents)
    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg.update(rollouts=25, learning_epochs=10, mini_batches=4, learning_rate=7e-4,
               observation_preprocessor=RunningStandardScaler, state_preprocessor=RunningStandardScaler)
    cfg["experiment"].update(tensorboard=False, checkpoint_interval=0, directory="/tmp/marlparts_training_rate")
    if "csv" in cfg["experiment"]:  # versions before the CSV sink do not have the key
        cfg["experiment"]["csv"] = False
    models = {u: {"policy": policy, "value": value} for u in env.possible_agents}
    agent = MAPPO(possible_agents=env.possible_agents, models=models,
                  memories={u: RandomMemory(memory_size=25, num_envs=64) for u in env.possible_agents},
                  observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                  state_spaces=env.state_spaces, cfg=cfg)
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 50, "disable_progressbar": True}).train()  # warm-up
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": steps, "disable_progressbar": True})
    start = time.perf_counter()
    trainer.train()
    print((time.perf_counter() - start) / steps)


if __name__ == "__main__":
    main()
