"""IPPO with shared parameters on MPE simple_spread (3 agents, 3 landmarks).

One policy and one critic shared by every agent; the critic reads only the agent's own
observation. Run ``python examples/mpe/simple_spread_ippo.py --help`` for the options.
"""

import torch
from example_common import parse_arguments, train_save_evaluate
from mpe2 import simple_spread_v3

from marlparts.agents import IPPO, IPPO_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, mlp
from marlparts.resources import RunningStandardScaler
from marlparts.utils import set_seed

NUM_ENVS = 64  # env copies stepped together


class Policy(CategoricalMixin, Model):
    """An MLP that outputs the logits of a categorical policy."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(64, 64), output_gain=0.01)

    def compute(self, inputs, role=""):
        """Logits for ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    """An MLP that outputs the value of an agent's observation."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(64, 64))

    def compute(self, inputs, role=""):
        """Value of ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


def make_env(num_envs: int = NUM_ENVS, workers: int = 0, seed: int = 0, device: str = "cpu") -> MultiAgentEnv:
    """simple_spread_v3 with N=3, max_cycles=25, local_ratio=0.5 as ``num_envs`` copies, tensors on ``device``."""
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25, local_ratio=0.5),
                    num_envs=num_envs, workers=workers, seed=seed, device=device,
                    state_source="observations")  # equals mpe2's state(), without recomputing it


def make_agent(env: MultiAgentEnv, directory: str = "runs/simple_spread_ippo", **overrides) -> IPPO:
    """IPPO with one policy and one critic shared by every agent of ``env``."""
    uid = env.possible_agents[0]
    policy = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    value = Value(observation_space=env.observation_space(uid))
    models = {uid: {"policy": policy, "value": value} for uid in env.possible_agents}

    cfg = IPPO_DEFAULT_CONFIG.copy()
    cfg["rollouts"] = 25  # one whole episode of every copy per update: 64 x 25 = 1600 env steps
    cfg["learning_epochs"] = 10
    cfg["mini_batches"] = 4  # 40 gradient steps per update: without a central critic IPPO needs more
    cfg["learning_rate"] = 7e-4
    cfg["observation_preprocessor"] = RunningStandardScaler
    cfg["state_preprocessor"] = RunningStandardScaler
    cfg["experiment"]["directory"] = directory
    cfg.update(overrides)
    memories = {uid: RandomMemory(memory_size=cfg["rollouts"], num_envs=env.num_envs) for uid in env.possible_agents}
    return IPPO(possible_agents=env.possible_agents, models=models, memories=memories,
                observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                device=env.device, cfg=cfg)


def main() -> None:
    """Train, save the agent, and print the greedy evaluation over 100 episodes."""
    args = parse_arguments(__doc__, timesteps=1_000_000, directory="runs/simple_spread_ippo", num_envs=NUM_ENVS)
    set_seed(args.seed)
    env = make_env(args.num_envs, args.workers, args.seed, device=args.device)
    train_save_evaluate(env, make_agent(env, args.directory), args.timesteps)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
