"""The tests' and benchmarks' own builders of simple_spread agents, with the configurations the examples use.

They build their agents here rather than through the examples' functions, so that an example
stays a script that reads top to bottom; ``test_examples.py`` and ``benchmarks/learning.py`` run
the scripts themselves.
"""

import torch
from mpe2 import simple_spread_v3

from marlparts.agents import (
    IPPO,
    IPPO_DEFAULT_CONFIG,
    MADDPG,
    MADDPG_DEFAULT_CONFIG,
    MAPPO,
    MAPPO_DEFAULT_CONFIG,
    MATD3,
    MATD3_DEFAULT_CONFIG,
    VDAC,
    VDAC_DEFAULT_CONFIG,
)
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, mlp
from marlparts.resources import RunningStandardScaler
from marlparts.utils.spaces import is_discrete, joint_space

COPIES = {"mappo": 64, "ippo": 64, "vdac": 64, "maddpg": 16, "matd3": 16}


class CategoricalPolicy(CategoricalMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(64, 64), output_gain=0.01)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class MLP(DeterministicMixin, Model):
    def __init__(self, activation=torch.nn.Tanh, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(64, 64), activation=activation)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class DeterministicPolicy(DeterministicMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(64, 64), activation=torch.nn.ReLU,
                       output_gain=0.01)
        self.discrete = is_discrete(self.action_space)
        if not self.discrete:
            self.register_buffer("low", torch.as_tensor(self.action_space.low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(self.action_space.high, dtype=torch.float32))

    def compute(self, inputs, role=""):
        output = self.net(inputs["observations"])
        if self.discrete:
            return output, {}
        return self.low + (self.high - self.low) * torch.sigmoid(output), {}


def make_spread_env(num_envs, *, seed=0, agents=3, continuous=False, device="cpu", workers=0):
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=agents, max_cycles=25, local_ratio=0.5,
                                                          continuous_actions=continuous),
                    num_envs=num_envs, seed=seed, device=device, state_source="observations", workers=workers)


def make_spread_agent(name, env, directory, separate_models=False, **overrides):
    """``name`` in mappo, ippo, vdac, maddpg, matd3: one policy (and critic) shared by every agent, or for mappo
    and ippo with ``separate_models``, each agent's own policy and critic (MAPPO's critics then output one
    value each: ``agent_specific_values="none"``).
    """
    uid = env.possible_agents[0]
    memories = {}
    if name == "vdac":  # the VDAC example's settings
        policy = CategoricalPolicy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
        value = MLP(observation_space=env.observation_space(uid))
        models = {u: {"policy": policy, "value": value} for u in env.possible_agents}
        cfg = VDAC_DEFAULT_CONFIG.copy()
        cfg.update(rollouts=25, learning_epochs=10, mini_batches=4, learning_rate=1.5e-3, discount_factor=0.95,
                   team_reward="mean", clip_predicted_values=False, observation_preprocessor=RunningStandardScaler,
                   state_preprocessor=RunningStandardScaler)
    elif name in ("mappo", "ippo"):
        policy = CategoricalPolicy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
        if name == "mappo":
            value = MLP(observation_space=env.state_space, output_size=env.num_agents)
            cfg = MAPPO_DEFAULT_CONFIG.copy()
        else:
            value = MLP(observation_space=env.observation_space(uid))
            cfg = IPPO_DEFAULT_CONFIG.copy()
        models = {u: {"policy": policy, "value": value} for u in env.possible_agents}
        if separate_models:
            models = {u: {"policy": CategoricalPolicy(observation_space=env.observation_space(u),
                                                      action_space=env.action_space(u)),
                          "value": MLP(observation_space=env.state_space if name == "mappo" else env.observation_space(u))}
                      for u in env.possible_agents}
            if name == "mappo":
                cfg["agent_specific_values"] = "none"
        cfg.update(rollouts=25, learning_epochs=10, mini_batches=4, learning_rate=7e-4,
                   observation_preprocessor=RunningStandardScaler, state_preprocessor=RunningStandardScaler)
        if name == "mappo":  # the MAPPO example's faster settings
            cfg.update(learning_rate=1.5e-3, discount_factor=0.95)
        memory_size = 25
    else:
        policy = DeterministicPolicy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
        critic_space = joint_space([*env.observation_spaces.values(), *env.action_spaces.values()])
        roles = ("critic", "critic_2") if name == "matd3" else ("critic",)
        critics = {role: MLP(observation_space=critic_space, output_size=env.num_agents, activation=torch.nn.ReLU)
                   for role in roles}
        models = {u: {"policy": policy, **critics} for u in env.possible_agents}
        cfg = (MATD3_DEFAULT_CONFIG if name == "matd3" else MADDPG_DEFAULT_CONFIG).copy()
        cfg.update(batch_size=1024, learning_starts=100, update_interval=4, discount_factor=0.95, polyak=0.01,
                   actor_learning_rate=1e-3, critic_learning_rate=1e-3)
        cfg["exploration"]["noise_kwargs"] = {"std": 0.1}
        memory_size = 500_000 // env.num_envs
    cfg["experiment"]["directory"] = directory
    cfg.update(overrides)
    memory_size = cfg["rollouts"] if name in ("mappo", "ippo", "vdac") else memory_size
    memories = {u: RandomMemory(memory_size=memory_size, num_envs=env.num_envs) for u in env.possible_agents}
    algorithm = {"mappo": MAPPO, "ippo": IPPO, "vdac": VDAC, "maddpg": MADDPG, "matd3": MATD3}[name]
    kwargs = dict(possible_agents=env.possible_agents, models=models, memories=memories,
                  observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, device=env.device, cfg=cfg)
    if name != "ippo":
        kwargs["state_spaces"] = env.state_spaces
    return algorithm(**kwargs)
