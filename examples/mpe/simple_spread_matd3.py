"""MATD3 with shared parameters on MPE simple_spread (3 agents, 3 landmarks), continuous actions.

The same models as the MADDPG example plus a second critic; MATD3 itself is a small subclass
of MADDPG (twin critics, target policy smoothing, delayed actor updates).
Run ``python examples/mpe/simple_spread_matd3.py --help`` for the options.
"""

import torch
from example_common import parse_arguments, train_save_evaluate
from simple_spread_maddpg import NUM_ENVS, make_env
from simple_spread_maddpg import make_agent as make_maddpg_agent

from marlparts.agents import MATD3, MATD3_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv
from marlparts.utils import set_seed


def make_agent(env: MultiAgentEnv, directory: str = "runs/simple_spread_matd3", **overrides) -> MATD3:
    """MATD3 with one policy and two critics shared by every agent of ``env``."""
    return make_maddpg_agent(env, directory, algorithm=MATD3, default_config=MATD3_DEFAULT_CONFIG,
                             critic_roles=("critic", "critic_2"), **overrides)


def main() -> None:
    """Train, save the agent, and print the greedy evaluation over 100 episodes."""
    args = parse_arguments(__doc__, timesteps=2_000_000, directory="runs/simple_spread_matd3", num_envs=NUM_ENVS)
    set_seed(args.seed)
    env = make_env(args.num_envs, args.workers, args.seed, device=args.device)
    train_save_evaluate(env, make_agent(env, args.directory), args.timesteps)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
