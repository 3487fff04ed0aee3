"""One model as both the policy and the value of its agents (one network, two heads)."""

import copy

import pytest
import torch
from helpers import Policy, Value, build_mappo
from torch import nn
from toy_envs import CountingEnv

from marlparts.agents import IA2C, IA2C_DEFAULT_CONFIG, IPPO, IPPO_DEFAULT_CONFIG, MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, Model, mlp
from marlparts.resources import PopArt, RunningStandardScaler
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed


class TwoHeads(CategoricalMixin, Model):
    """A policy and a value in one model: the value comes with the policy's output and alone for role "value"."""

    def __init__(self, *, policy_net: nn.Module, value_net: nn.Module, return_values: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.policy_net, self.value_net, self.return_values = policy_net, value_net, return_values
        self.output_layer = value_net[-1]  # the layer that gives the values (PopArt rescales it)
        self.roles = []

    def compute(self, inputs, role=""):
        self.roles.append((role, torch.is_grad_enabled()))
        values = self.value_net(inputs["observations"])
        if role == "value":
            return values, {}
        return self.policy_net(inputs["observations"]), ({"values": values} if self.return_values else {})


def _env():
    return wrap_env(lambda: CountingEnv(max_steps=6, leave_at=3), num_envs=3, seed=0)


def _nets(env):
    set_seed(3)
    size = env.observation_space("agent_0").shape[0]
    return mlp(size, 4, hidden_sizes=(16,), output_gain=0.01), mlp(size, 1, hidden_sizes=(16,))


def _algorithm(env, algorithm, models, tmp_path, **overrides):
    defaults = IPPO_DEFAULT_CONFIG if algorithm is IPPO else IA2C_DEFAULT_CONFIG
    cfg = defaults.copy()
    cfg.update({"rollouts": 6, "learning_epochs": 2, "mini_batches": 2, "grad_norm_clip": 0.0,
                "value_min_steps": 4,  # separate critics take the epochs' steps only, as a shared model does
                "observation_preprocessor": RunningStandardScaler, "state_preprocessor": RunningStandardScaler,
                **overrides})
    cfg["experiment"].update(directory=str(tmp_path), checkpoint_interval=0, tensorboard=False)
    memories = {uid: RandomMemory(memory_size=6, num_envs=env.num_envs) for uid in env.possible_agents}
    return algorithm(possible_agents=env.possible_agents, models=models, memories=memories,
                     observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, cfg=cfg)


@pytest.mark.parametrize("algorithm", [IPPO, IA2C])
@pytest.mark.parametrize("value_preprocessor", [PopArt, RunningStandardScaler])
def test_one_model_for_policy_and_value_trains_as_the_two_models_would(tmp_path, algorithm, value_preprocessor):
    env = _env()
    policy_net, value_net = _nets(env)
    obs_space, act_space = env.observation_space("agent_0"), env.action_space("agent_0")
    shared = TwoHeads(policy_net=copy.deepcopy(policy_net), value_net=copy.deepcopy(value_net),
                      observation_space=obs_space, action_space=act_space)
    policy, value = Policy(observation_space=obs_space, action_space=act_space), Value(observation_space=obs_space)
    policy.net, value.net = copy.deepcopy(policy_net), copy.deepcopy(value_net)
    trained = {}
    for name, models in (("shared", {"policy": shared, "value": shared}), ("separate", {"policy": policy, "value": value})):
        agent = _algorithm(env, algorithm, {uid: models for uid in env.possible_agents}, tmp_path / name,
                           value_preprocessor=value_preprocessor)
        set_seed(0)
        SequentialTrainer(env=_env(), agents=agent, cfg={"timesteps": 18, "disable_progressbar": True}).train()
        trained[name] = agent
    # the same parameters and the same value statistics after three updates: nothing is lost by sharing
    assert torch.allclose(shared.policy_net[0].weight, policy.net[0].weight, atol=1e-5)
    assert torch.allclose(shared.value_net[-1].weight, value.net[-1].weight, atol=1e-5)
    assert not torch.allclose(shared.value_net[-1].weight, value_net[-1].weight)  # and the value head did learn
    normaliser = trained["shared"].groups[0].trained["value"].value_normaliser
    reference = trained["separate"].groups[0].trained["value"].value_normaliser
    assert normaliser.running_mean.abs().item() > 0 and torch.allclose(normaliser.running_mean, reference.running_mean)
    assert torch.allclose(normaliser.running_variance, reference.running_variance)
    # the update ran the model once per minibatch (policy and value from one pass), never as "value" with gradients
    assert ("value", True) not in shared.roles
    assert sum(1 for role, grad in shared.roles if role == "policy" and grad) == 3 * agent.cfg["learning_epochs"] * \
        agent.cfg["mini_batches"]
    assert len(trained["shared"].trained) == 1  # one optimizer for the one model


def test_a_shared_model_must_give_its_values_with_the_policy_and_have_its_value_layer_named(tmp_path):
    env = _env()
    policy_net, value_net = _nets(env)
    spaces = dict(observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0"))
    silent = TwoHeads(policy_net=policy_net, value_net=value_net, return_values=False, **spaces)
    with pytest.raises(ValueError, match=r"models\['agent_0'\].*policy.*value.*outputs\['values'\]"):
        _algorithm(env, IPPO, {uid: {"policy": silent, "value": silent} for uid in env.possible_agents}, tmp_path)
    unnamed = TwoHeads(policy_net=policy_net, value_net=value_net, **spaces)
    del unnamed.output_layer
    with pytest.raises(ValueError, match="output_layer"):
        _algorithm(env, IPPO, {uid: {"policy": unnamed, "value": unnamed} for uid in env.possible_agents}, tmp_path,
                   value_preprocessor=PopArt)
    named = TwoHeads(policy_net=policy_net, value_net=value_net, **spaces)
    with pytest.raises(ValueError, match="state_preprocessor.*observation_preprocessor"):
        _algorithm(env, IPPO, {uid: {"policy": named, "value": named} for uid in env.possible_agents}, tmp_path,
                   state_preprocessor=None)


def test_one_model_in_two_roles_is_refused_where_the_algorithm_cannot_share_it(tmp_path):
    env = _env()
    policy_net, value_net = _nets(env)
    spaces = dict(observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0"))
    shared = TwoHeads(policy_net=policy_net, value_net=value_net, **spaces)
    reference = build_mappo(env, directory=str(tmp_path))  # a MAPPO that builds
    models = {uid: {"policy": shared, "value": shared} for uid in env.possible_agents}
    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg["experiment"]["directory"] = str(tmp_path)
    with pytest.raises(ValueError, match=r"models\['agent_0'\]\['policy'\].*models\['agent_0'\]\['value'\].*MAPPO"):
        MAPPO(possible_agents=env.possible_agents, models=models, memories=reference.memories,
              observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
              state_spaces=reference.state_spaces, cfg=cfg)
    # one agent's policy as another agent's value: never a shared model
    crossed = {uid: {"policy": shared, "value": Value(observation_space=spaces["observation_space"])}
               for uid in env.possible_agents}
    crossed["agent_2"] = {"policy": Policy(**spaces), "value": shared}
    with pytest.raises(ValueError, match=r"models\['agent_0'\]\['policy'\].*models\['agent_2'\]\['value'\]"):
        _algorithm(env, IPPO, crossed, tmp_path)


class Head(CategoricalMixin, Model):
    """A model whose first layers are a module it may share with another model."""

    def __init__(self, *, trunk: nn.Module, outputs: int, **kwargs):
        super().__init__(**kwargs)
        self.trunk, self.head = trunk, nn.Linear(16, outputs)

    def compute(self, inputs, role=""):
        return self.head(self.trunk(inputs["observations"])), {}


class ValueHead(Head):
    """The same as a value (deterministic output)."""

    def act(self, inputs, role=""):
        output, outputs = self.compute(inputs, role)
        return output, None, {**outputs, "mean_actions": output}


def test_models_that_share_a_submodule_are_refused_as_each_would_step_it_with_its_own_optimizer(tmp_path):
    env = _env()
    obs_space, act_space = env.observation_space("agent_0"), env.action_space("agent_0")
    trunk = nn.Sequential(nn.Linear(3, 16), nn.Tanh())
    policy = Head(trunk=trunk, outputs=4, observation_space=obs_space, action_space=act_space)
    value = ValueHead(trunk=trunk, outputs=1, observation_space=obs_space)
    with pytest.raises(ValueError, match=r"models\['agent_0'\]\['policy'\].*models\['agent_0'\]\['value'\].*share"):
        _algorithm(env, IPPO, {uid: {"policy": policy, "value": value} for uid in env.possible_agents}, tmp_path)
    # two agents' own policies over one trunk: the same
    other = Head(trunk=trunk, outputs=4, observation_space=obs_space, action_space=act_space)
    models = {uid: {"policy": policy, "value": Value(observation_space=obs_space)} for uid in env.possible_agents}
    models["agent_2"]["policy"] = other
    with pytest.raises(ValueError, match=r"models\['agent_0'\]\['policy'\].*models\['agent_2'\]\['policy'\].*share"):
        _algorithm(env, IPPO, models, tmp_path)
