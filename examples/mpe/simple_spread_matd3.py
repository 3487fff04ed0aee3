"""MATD3 with shared parameters on MPE simple_spread (3 agents, 3 landmarks), continuous actions.

The same models as the MADDPG example plus a second critic; MATD3 itself is a small subclass
of MADDPG (twin critics, target policy smoothing, delayed actor updates).
Run ``python examples/mpe/simple_spread_matd3.py --help`` for the options.
"""

import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from simple_spread_maddpg import make_agent as make_maddpg_agent  # noqa: E402
from simple_spread_maddpg import make_env  # noqa: E402

from marlparts.agents import MATD3, MATD3_DEFAULT_CONFIG  # noqa: E402
from marlparts.envs import MultiAgentEnv  # noqa: E402
from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402


def make_agent(env: MultiAgentEnv, directory: str = "runs/simple_spread_matd3", **overrides) -> MATD3:
    """MATD3 with one policy and two critics shared by every agent of ``env``."""
    return make_maddpg_agent(env, directory, algorithm=MATD3, default_config=MATD3_DEFAULT_CONFIG,
                             critic_roles=("critic", "critic_2"), **overrides)


def main() -> None:
    """Train, save the agent, and print the greedy evaluation over 100 episodes."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--timesteps", type=int, default=2_000_000, help="env steps (all copies counted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--workers", type=int, default=0, help="worker processes for the env copies (0: none)")
    parser.add_argument("--directory", default="runs/simple_spread_matd3")
    args = parser.parse_args()

    set_seed(args.seed)
    env = make_env(args.num_envs, args.workers, args.seed)
    agent = make_agent(env, args.directory)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": args.timesteps // env.num_envs})
    trainer.train()
    agent.save(f"{agent.experiment_dir}/checkpoints/final_agent.pt")
    result = trainer.eval(episodes=100)
    print(f"greedy evaluation over {result['episodes']} episodes: mean return {result['mean_return']:.2f} "
          f"(per agent: {', '.join(f'{k} {v:.2f}' for k, v in result['returns'].items())})")
    print(f"checkpoint: {agent.experiment_dir}/checkpoints/final_agent.pt")
    env.close()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
