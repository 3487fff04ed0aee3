"""The critic takes at least ``value_min_steps`` gradient steps per update, alone after the joint ones: with
A2C's schedule (one step per rollout) a critic of one step lags its targets and the policy follows its errors.
"""

import pytest
import torch
from helpers import Policy, Value, build_mappo
from mpe2 import simple_spread_v3
from test_coma import build as build_coma
from test_happo import build as build_happo

from marlparts.agents import COMA, HAPPO, IA2C_DEFAULT_CONFIG, IPPO, IPPO_DEFAULT_CONFIG, MAA2C_DEFAULT_CONFIG
from marlparts.envs import wrap_env
from marlparts.memories import RandomMemory
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed


def spread():
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25), num_envs=2, seed=0)


def steps_taken(record):
    """How many steps the record's optimizer has taken (Adam counts them per parameter)."""
    counts = {int(record.optimizer.state[parameter]["step"]) for parameter in record.trained_parameters()}
    assert len(counts) == 1
    return counts.pop()


def ippo_with(env, models, directory, **cfg):
    """IPPO over ``env`` with ``models[role]`` shared by every agent, one epoch of one minibatch on 4-step rollouts."""
    config = IPPO_DEFAULT_CONFIG.copy()
    config.update(rollouts=4, learning_epochs=1, mini_batches=1, **cfg)
    config["experiment"].update(directory=directory, checkpoint_interval=0)
    return IPPO(possible_agents=env.possible_agents, models={uid: dict(models) for uid in env.possible_agents},
                memories={uid: RandomMemory(memory_size=4, num_envs=env.num_envs) for uid in env.possible_agents},
                observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, cfg=config)


def one_update(agent, env, rollouts):
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": rollouts, "disable_progressbar": True}).train()
    return agent


@pytest.mark.parametrize("algorithm", ["ippo", "mappo"])
@pytest.mark.parametrize("schedule, value_min_steps, policy_steps, value_steps", [
    ({"learning_epochs": 1, "mini_batches": 1}, None, 1, 20),  # the default tops A2C's one step up to 20
    ({"learning_epochs": 1, "mini_batches": 1}, 1, 1, 1),
    ({"learning_epochs": 1, "mini_batches": 2}, 7, 2, 7),      # passes over the minibatches, cut at 7
    ({"learning_epochs": 2, "mini_batches": 2}, 4, 4, 4),      # enough steps already: none added
    ({"learning_epochs": 10, "mini_batches": 2}, None, 20, 20),
])
def test_the_critic_takes_at_least_value_min_steps_per_update(tmp_path, algorithm, schedule, value_min_steps,
                                                              policy_steps, value_steps):
    set_seed(0)
    env = spread()
    cfg = dict(schedule, **({} if value_min_steps is None else {"value_min_steps": value_min_steps}))
    agent = one_update(build_mappo(env, rollouts=4, directory=str(tmp_path), cfg=cfg, algorithm=algorithm), env, 4)
    group = agent.groups[0]
    assert steps_taken(group.trained["policy"]) == policy_steps
    assert steps_taken(group.trained["value"]) == value_steps


class BatchNormPolicy(Policy):
    """A policy whose forward pass in training mode moves its batch-norm statistics."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.norm = torch.nn.BatchNorm1d(self.num_observations)

    def compute(self, inputs, role=""):
        return self.net(self.norm(inputs["observations"])), {}


def test_the_critic_s_steps_alone_leave_the_policy_as_the_joint_step_left_it(tmp_path):
    trained = {}
    for value_min_steps in (1, 10):
        set_seed(0)
        env = spread()
        uid = env.possible_agents[0]
        policy = BatchNormPolicy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
        value = Value(observation_space=env.observation_space(uid))
        agent = ippo_with(env, {"policy": policy, "value": value}, str(tmp_path / str(value_min_steps)),
                          value_min_steps=value_min_steps)
        one_update(agent, env, 4)
        record = agent.groups[0].trained["policy"]
        trained[value_min_steps] = {"policy": policy.state_dict(),  # parameters and batch-norm statistics
                                    "adam": [record.optimizer.state[p]["exp_avg"] for p in record.trained_parameters()],
                                    "value": torch.nn.utils.parameters_to_vector(value.parameters())}
    for name, tensor in trained[1]["policy"].items():
        assert torch.equal(tensor, trained[10]["policy"][name]), name
    assert all(torch.equal(a, b) for a, b in zip(trained[1]["adam"], trained[10]["adam"]))
    assert not torch.allclose(trained[1]["value"], trained[10]["value"])


class PolicyValue(Policy):
    """One model as policy and critic: the logits and, in ``outputs["values"]``, the value."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.value_head = self.output_layer = torch.nn.Linear(self.num_observations, 1)  # (PopArt rescales it)

    def compute(self, inputs, role=""):
        values = self.value_head(inputs["observations"])
        return (values, {}) if role == "value" else (self.net(inputs["observations"]), {"values": values})


def test_a_model_that_is_policy_and_critic_takes_no_step_alone(tmp_path):
    set_seed(0)
    env = spread()
    uid = env.possible_agents[0]
    model = PolicyValue(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    agent = one_update(ippo_with(env, {"policy": model, "value": model}, str(tmp_path)), env, 4)
    assert steps_taken(agent.groups[0].trained["policy"]) == 1  # a step alone would move the policy too


@pytest.mark.parametrize("build, algorithm", [(build_happo, HAPPO), (build_coma, COMA)])
def test_happo_and_coma_top_their_critic_s_passes_up_to_value_min_steps(tmp_path, build, algorithm):
    set_seed(0)
    env = spread()
    agent = one_update(build(env, str(tmp_path), algorithm=algorithm, cfg={"value_min_steps": 6}), env, 5)
    assert steps_taken(agent.groups[0].trained["value"]) == 6
    assert steps_taken(agent.groups[0].trained["policy"]) == 1


def test_a2c_takes_one_critic_step_as_epymarl_does():
    assert IA2C_DEFAULT_CONFIG["value_min_steps"] == MAA2C_DEFAULT_CONFIG["value_min_steps"] == 1


def test_value_min_steps_below_one_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="value_min_steps"):
        build_mappo(spread(), directory=str(tmp_path), cfg={"value_min_steps": 0})
