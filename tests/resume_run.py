"""A short deterministic training run, used by the resume tests in a fresh process.

    python resume_run.py ALGORITHM STEPS OUT [--load CHECKPOINT] [--save CHECKPOINT]

trains ALGORITHM ("mappo" or "maddpg") for STEPS vectorized steps on a deterministic env, after
loading CHECKPOINT if given, saves a checkpoint if asked, and writes every parameter to OUT.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from helpers import build_mappo  # noqa: E402
from toy_envs import ContinuousEnv, CountingEnv  # noqa: E402

from marlparts.envs import wrap_env  # noqa: E402
from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402


def build(algorithm, directory):
    if algorithm == "mappo":
        env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=3), num_envs=2, seed=0)
        agent = build_mappo(env, rollouts=5, directory=directory,
                            cfg={"learning_epochs": 2, "mini_batches": 2, "experiment": {"tensorboard": False}})
    else:
        from test_maddpg import build as build_maddpg

        env = wrap_env(lambda: ContinuousEnv(max_steps=5, leave_at=3), num_envs=2, seed=0)
        agent = build_maddpg(env, cfg={"random_timesteps": 2})
        agent.cfg["experiment"]["checkpoint_memory"] = True
    return env, agent


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("algorithm")
    parser.add_argument("steps", type=int)
    parser.add_argument("out")
    parser.add_argument("--load")
    parser.add_argument("--save")
    args = parser.parse_args()
    torch.set_num_threads(1)
    set_seed(0)
    env, agent = build(args.algorithm, os.path.dirname(os.path.abspath(args.out)))
    if args.load:
        agent.load(args.load)
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": args.steps, "disable_progressbar": True}).train()
    if args.save:
        agent.save(args.save)
    torch.save({"parameters": [p.detach().clone() for m in agent.distinct_models() for p in m.parameters()],
                "timestep": agent.timestep}, args.out)


if __name__ == "__main__":
    main()
