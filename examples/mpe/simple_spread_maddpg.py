"""MADDPG with shared parameters on MPE simple_spread (3 agents, 3 landmarks).

One deterministic policy for every agent and one centralised critic that reads every agent's
observation and action and outputs one Q-value per agent. Continuous actions by default
(Gaussian exploration noise); ``--discrete`` uses the discrete task with Gumbel-softmax.
Run ``python examples/mpe/simple_spread_maddpg.py --help`` for the options.
"""

import torch
from example_common import parse_arguments, train_save_evaluate
from mpe2 import simple_spread_v3

from marlparts.agents import MADDPG, MADDPG_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import DeterministicMixin, Model, mlp
from marlparts.utils import set_seed
from marlparts.utils.spaces import is_discrete, joint_space

NUM_ENVS = 16  # env copies stepped together


class Policy(DeterministicMixin, Model):
    """An MLP that outputs logits (discrete actions) or actions squashed into the Box (continuous)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(64, 64), activation=torch.nn.ReLU,
                       output_gain=0.01)
        self.discrete = is_discrete(self.action_space)
        if not self.discrete:
            self.register_buffer("low", torch.as_tensor(self.action_space.low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(self.action_space.high, dtype=torch.float32))

    def compute(self, inputs, role=""):
        """Logits, or actions between the Box bounds."""
        output = self.net(inputs["observations"])
        if self.discrete:
            return output, {}
        return self.low + (self.high - self.low) * torch.sigmoid(output), {}


class Critic(DeterministicMixin, Model):
    """An MLP from every agent's observation and action to one Q-value per agent."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(64, 64), activation=torch.nn.ReLU)

    def compute(self, inputs, role=""):
        """Q-values for ``inputs["observations"]`` (observations and actions concatenated)."""
        return self.net(inputs["observations"]), {}


def make_env(num_envs: int = NUM_ENVS, workers: int = 0, seed: int = 0, discrete: bool = False,
             device: str = "cpu") -> MultiAgentEnv:
    """simple_spread_v3 with N=3, max_cycles=25, local_ratio=0.5 as ``num_envs`` copies, tensors on ``device``."""
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25, local_ratio=0.5,
                                                          continuous_actions=not discrete),
                    num_envs=num_envs, workers=workers, seed=seed, device=device,
                    state_source="observations")  # equals mpe2's state(), without recomputing it


def make_agent(env: MultiAgentEnv, directory: str = "runs/simple_spread_maddpg", algorithm=MADDPG,
               default_config=MADDPG_DEFAULT_CONFIG, critic_roles=("critic",), **overrides) -> MADDPG:
    """MADDPG (or a subclass, e.g. MATD3) with one policy and one critic per role shared by every agent."""
    uid = env.possible_agents[0]
    policy = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    critics = {role: Critic(observation_space=joint_space([*env.observation_spaces.values(), *env.action_spaces.values()]),
                            output_size=env.num_agents)
               for role in critic_roles}
    models = {uid: {"policy": policy, **critics} for uid in env.possible_agents}

    cfg = default_config.copy()
    cfg["batch_size"] = 1024
    cfg["learning_starts"] = 100
    cfg["update_interval"] = 4  # one gradient step per 4 x num_envs env steps (the paper: one per 100 samples)
    cfg["discount_factor"] = 0.95
    cfg["polyak"] = 0.01
    cfg["actor_learning_rate"] = 1e-3
    cfg["critic_learning_rate"] = 1e-3
    cfg["exploration"]["noise_kwargs"] = {"std": 0.1}
    cfg["experiment"]["directory"] = directory
    cfg.update(overrides)
    replay_steps = 500_000 // env.num_envs  # half a million transitions per agent
    memories = {uid: RandomMemory(memory_size=replay_steps, num_envs=env.num_envs) for uid in env.possible_agents}
    return algorithm(possible_agents=env.possible_agents, models=models, memories=memories,
                     observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                     state_spaces=env.state_spaces, device=env.device, cfg=cfg)


def main() -> None:
    """Train, save the agent, and print the greedy evaluation over 100 episodes."""
    args = parse_arguments(__doc__, timesteps=2_000_000, directory="runs/simple_spread_maddpg", num_envs=NUM_ENVS,
                           discrete_flag=True)
    set_seed(args.seed)
    env = make_env(args.num_envs, args.workers, args.seed, device=args.device, discrete=args.discrete)
    train_save_evaluate(env, make_agent(env, args.directory), args.timesteps)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
