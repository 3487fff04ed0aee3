"""Small builders shared by the algorithm tests."""

import gymnasium
import numpy as np
import torch

from marlparts.agents import IPPO, IPPO_DEFAULT_CONFIG, MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, mlp
from marlparts.trainers import SequentialTrainer
from marlparts.utils.config import merge_config
from marlparts.utils.spaces import append_agent_id


class Policy(CategoricalMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(16,))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(16,))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def build_mappo(env, *, share=True, rollouts=4, directory="runs/test", cfg=None, algorithm="mappo", uids=None):
    uids = list(uids or env.possible_agents)
    obs_space, act_space = env.observation_space(uids[0]), env.action_space(uids[0])
    value_space = env.state_space if algorithm == "mappo" else obs_space
    if algorithm == "mappo" and (cfg or {}).get("agent_specific_values") == "one_hot":
        value_space = append_agent_id(env.state_space, len(uids))
    one_value_per_agent = algorithm == "mappo" and (cfg or {}).get("agent_specific_values", "outputs") == "outputs"
    outputs = len(uids) if one_value_per_agent else 1
    if share:
        policy = Policy(observation_space=obs_space, action_space=act_space)
        value = Value(observation_space=value_space, output_size=outputs)
        models = {u: {"policy": policy, "value": value} for u in uids}
    else:
        models = {u: {"policy": Policy(observation_space=obs_space, action_space=act_space),
                      "value": Value(observation_space=value_space, output_size=outputs)} for u in uids}
    base = (MAPPO_DEFAULT_CONFIG if algorithm == "mappo" else IPPO_DEFAULT_CONFIG).copy()
    base["rollouts"] = rollouts
    base["experiment"]["directory"] = directory
    base["experiment"]["checkpoint_interval"] = 0
    base = merge_config(base, cfg or {})
    memories = {u: RandomMemory(memory_size=rollouts, num_envs=env.num_envs) for u in uids}
    kwargs = dict(possible_agents=uids, models=models, memories=memories,
                  observation_spaces={u: env.observation_space(u) for u in uids},
                  action_spaces={u: env.action_space(u) for u in uids}, device=env.device, cfg=base)
    if algorithm == "mappo":
        return MAPPO(state_spaces={u: env.state_space for u in uids}, **kwargs)
    return IPPO(**kwargs)


def box(n):
    return gymnasium.spaces.Box(-np.inf, np.inf, (n,), np.float32)


def parameters_vector(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def greedy_return_after_training(env, agent, budget, episodes=100):
    """Train ``agent`` on ``env`` for ``budget`` env steps, then the mean greedy return over ``episodes``."""
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": budget // env.num_envs,
                                                             "disable_progressbar": True})
    trainer.train()
    result = trainer.eval(episodes=episodes)
    env.close()
    return result["mean_return"]
