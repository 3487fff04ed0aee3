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
                                                             "disable_progressbar": True, "eval_actions": "greedy"})
    trainer.train()
    result = trainer.eval(episodes=episodes)
    env.close()
    return result["mean_return"]


def greedy_sampling(monkeypatch):
    """Categorical policies take their most likely action, so two runs that sample differently act alike."""
    monkeypatch.setattr(torch, "multinomial", lambda probs, samples: probs.argmax(-1, keepdim=True))


def assert_same_state(first, second, atol=1e-5, rtol=1e-4):
    """The checkpoints of two algorithms hold the same parts, with tensors equal within ``atol``."""
    a, b = first.state_dict()["modules"], second.state_dict()["modules"]
    assert sorted(a) == sorted(b)

    def compare(x, y, where):
        if isinstance(x, torch.Tensor):
            assert torch.allclose(x.double(), y.double(), atol=atol, rtol=rtol), where
        elif isinstance(x, dict):
            assert sorted(x, key=str) == sorted(y, key=str), where
            for key in x:
                compare(x[key], y[key], f"{where}/{key}")
        elif isinstance(x, (list, tuple)):
            assert len(x) == len(y), where
            for i, (u, v) in enumerate(zip(x, y)):
                compare(u, v, f"{where}/{i}")
        else:
            assert x == y, where

    for name in a:
        compare(a[name], b[name], name)


def drive_synthetic(agent, steps, uids, *, active=None, observation_size=4, state_size=6):
    """``steps`` synthetic transitions (2 env copies), the same for every agent driven with the same arguments;
    ``active(t)`` gives ``infos["active"]`` at step ``t``."""
    generator = torch.Generator().manual_seed(123)
    agent.init({"timesteps": steps})
    agent.set_mode("train")

    def draw():
        return ({u: torch.randn(2, observation_size, generator=generator) for u in uids},
                torch.randn(2, state_size, generator=generator))

    observations, states = draw()
    infos = {} if active is None else {"active": active(0)}
    for t in range(steps):
        actions = agent.act(observations, states, infos, t, steps)
        next_observations, next_states = draw()
        next_infos = {} if active is None else {"active": active(t + 1)}
        agent.record_transition(observations=observations, states=states, actions=actions,
                                rewards={u: torch.randn(2, 1, generator=generator) for u in uids},
                                next_observations=next_observations, next_states=next_states,
                                terminated={u: torch.rand(2, 1, generator=generator) < 0.1 for u in uids},
                                truncated={u: torch.zeros(2, 1, dtype=torch.bool) for u in uids},
                                infos=next_infos, timestep=t, timesteps=steps)
        agent.post_interaction(t, steps)
        observations, states, infos = next_observations, next_states, next_infos
