"""What an env returns is checked against its spaces and agents where it enters the batch, and actions that are
not finite never reach the env: each error names the agent, the env copy and the shapes."""

import gymnasium
import numpy as np
import pytest
import torch
from pettingzoo import ParallelEnv
from toy_envs import TupleSpacesEnv

from marlparts.envs import EnvCopyError, wrap_env


class MisbehavingEnv(ParallelEnv):
    """Agents ``a`` and ``b``, ``Box(3)`` observations, a state of 2 values, five-step episodes. From step
    ``at`` on (0: the reset too) the env gets one thing wrong, as ``fault`` says. Actions received are kept in
    ``received``; ``continuous`` gives ``Box(-1, 1, (2,))`` actions, ``masked`` masks in the infos.
    """

    metadata = {"name": "misbehaving_v0"}

    def __init__(self, fault=None, at=1, continuous=False, masked=False):
        self.possible_agents = ["a", "b"]
        self.fault, self.at, self.continuous, self.masked = fault, at, continuous, masked
        self.agents, self.t, self.received = [], 0, []

    def observation_space(self, uid):
        return gymnasium.spaces.Box(-np.inf, np.inf, (3,), np.float32)

    def action_space(self, uid):
        return gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32) if self.continuous else gymnasium.spaces.Discrete(4)

    def faulty(self, fault):
        return self.fault == fault and self.t >= self.at

    def state(self):
        if self.faulty("state of one value"):
            return np.float32(7.0)
        if self.faulty("state too long"):
            return np.zeros(5, np.float32)
        return np.array([self.t, 0.0], np.float32)

    def _results(self):
        observations = {uid: np.full(3, self.t, np.float32) for uid in self.agents}
        infos = {uid: {} for uid in self.agents}
        if self.masked:
            mask = np.ones(4, np.int8)
            for uid in self.agents:
                infos[uid]["action_mask"] = mask
            if self.faulty("mask of one value"):
                infos["a"]["action_mask"] = np.int8(1)
            if self.faulty("mask too long"):
                infos["a"]["action_mask"] = np.ones(5, np.int8)
        if self.faulty("observation of one value"):
            observations["a"] = np.float32(7.0)
        if self.faulty("observation too long"):
            observations["a"] = np.zeros(4, np.float32)
        if self.faulty("observation of text"):
            observations["a"] = np.array(["x", "y", "z"])
        if self.faulty("observation missing"):
            del observations["b"]
        if self.faulty("observation of an unknown agent"):
            observations["ghost"] = np.zeros(3, np.float32)
        return observations, infos

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return self._results()

    def step(self, actions):
        self.received.append(actions)
        self.t += 1
        rewards = {uid: 1.0 for uid in self.agents}
        terminated = {uid: False for uid in self.agents}
        truncated = {uid: self.t >= 5 for uid in self.agents}
        if self.faulty("reward of an unknown agent"):
            rewards["ghost"] = 1.0
        if self.faulty("reward of text"):
            rewards["a"] = "lots"
        if self.faulty("reward of two values"):
            rewards["a"] = np.array([1.0, 2.0])
        if self.faulty("termination of an unknown agent"):
            terminated["ghost"] = True
        if self.faulty("truncation of an unknown agent"):
            truncated["ghost"] = True
        if self.faulty("unknown agent plays on"):
            self.agents = self.agents + ["ghost"]
        if self.t >= 5:
            self.agents = []
        observations, infos = self._results()
        if self.faulty("unknown agent plays on"):
            observations["ghost"] = np.zeros(3, np.float32)
        return observations, rewards, terminated, truncated, infos


def misbehaving(fault=None, num_envs=2, workers=0, **kwargs):
    return wrap_env(lambda: MisbehavingEnv(fault, **kwargs), num_envs=num_envs, workers=workers, seed=0)


def discrete_actions(env):
    return {uid: torch.zeros(env.num_envs, 1, dtype=torch.long) for uid in env.possible_agents}


def received_by_copies(env):
    return [copy.received for copy in env.copies.block.envs]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_continuous_action_that_is_not_finite_is_refused_before_the_env_gets_it(value):
    env = misbehaving(continuous=True)
    env.reset()
    actions = {"a": torch.zeros(2, 2), "b": torch.tensor([[0.5, 0.5], [0.5, value]])}
    with pytest.raises(ValueError, match=rf"action for agent 'b' in env copy 1 is \[0.5, {value}\], which is not finite"):
        env.step(actions)
    assert received_by_copies(env) == [[], []]
    env.step({"a": torch.zeros(2, 2), "b": torch.full((2, 2), 5.0)})  # finite actions outside the Box are clipped
    assert all(np.all(actions["b"] == 1.0) for actions in received_by_copies(env)[0])


def test_a_batched_simulator_names_a_nan_action_as_not_finite():
    from test_isaaclab import make_task

    env = wrap_env(make_task(num_envs=2))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action for agent 'first' in env copy 1 is \[nan\], which is not finite"):
        env.step({"first": torch.tensor([[0.0], [float("nan")]]), "second": torch.zeros(2, 1)})


@pytest.mark.parametrize("at", [0, 1])
@pytest.mark.parametrize("fault,words", [
    ("observation of one value", r"observation of agent 'a' in env copy 0 has shape \(\) \(1 values\), but its space "
                                 r"Box\(-inf, inf, \(3,\), float32\) holds 3"),
    ("observation too long", r"observation of agent 'a' in env copy 0 has shape \(4,\) \(4 values\), but its space "
                             r"Box\(-inf, inf, \(3,\), float32\) holds 3"),
    ("observation of text", r"observation of agent 'a' in env copy 0 does not fit its space Box\(-inf, inf, \(3,\), "
                            r"float32\): could not convert string to float"),
    ("observation missing", r"agent 'b' plays on in env copy 0 \(it is in env.agents\), but the env returned no "
                            r"observation for it"),
    ("observation of an unknown agent", r"the env returned an observation for agent 'ghost' in env copy 0, which is not "
                                        r"one of its possible agents \['a', 'b'\]"),
])
def test_an_observation_that_does_not_fit_its_space_or_agent_is_named(fault, words, at):
    env = misbehaving(fault, at=at)
    with pytest.raises(ValueError, match=words):
        env.reset()
        env.step(discrete_actions(env))


@pytest.mark.parametrize("fault,words", [
    ("reward of an unknown agent", r"the env returned a reward for agent 'ghost' in env copy 0, which is not one of its "
                                   r"possible agents \['a', 'b'\]"),
    ("termination of an unknown agent", r"the env returned a termination flag for agent 'ghost' in env copy 0, which is "
                                        r"not one of its possible agents"),
    ("truncation of an unknown agent", r"the env returned a truncation flag for agent 'ghost' in env copy 0, which is "
                                       r"not one of its possible agents"),
    ("unknown agent plays on", r"agent 'ghost' plays on in env copy 0 \(it is in env.agents\), but it is not one of "
                               r"the env's possible agents \['a', 'b'\]"),
    ("reward of text", r"the reward of agent 'a' in env copy 0 is 'lots', not a number"),
    ("reward of two values", r"the reward of agent 'a' in env copy 0 is array\(\[1., 2.\]\), not a number"),
])
def test_step_results_for_unknown_agents_or_of_the_wrong_kind_are_named(fault, words):
    env = misbehaving(fault)
    env.reset()
    with pytest.raises(ValueError, match=words):
        env.step(discrete_actions(env))


@pytest.mark.parametrize("fault,words", [
    ("state of one value", r"state\(\) of env copy 0 has shape \(\) \(1 values\), but the state space "
                           r"Box\(-inf, inf, \(2,\), float32\) holds 2"),
    ("state too long", r"state\(\) of env copy 0 has shape \(5,\) \(5 values\), but the state space "
                       r"Box\(-inf, inf, \(2,\), float32\) holds 2"),
])
def test_a_state_that_does_not_fit_the_state_space_is_named(fault, words):
    env = misbehaving(fault)
    env.reset()
    with pytest.raises(ValueError, match=words):
        env.step(discrete_actions(env))


@pytest.mark.parametrize("fault,words", [
    ("mask of one value", r"action mask of agent 'a' in env copy 0 has shape \(\) \(1 values\), but its action space "
                          r"Discrete\(4\) needs 4"),
    ("mask too long", r"action mask of agent 'a' in env copy 0 has shape \(5,\) \(5 values\), but its action space "
                      r"Discrete\(4\) needs 4"),
])
def test_an_action_mask_that_does_not_fit_the_action_space_is_named(fault, words):
    env = misbehaving(fault, masked=True)
    env.reset()
    with pytest.raises(ValueError, match=words):
        env.step(discrete_actions(env))


def test_an_observation_that_does_not_fit_is_named_from_a_worker_process():
    env = misbehaving("observation too long", workers=1)
    try:
        env.reset()
        with pytest.raises(EnvCopyError, match=r"observation of agent 'a' in env copy 0 has shape \(4,\)"):
            env.step(discrete_actions(env))
    finally:
        env.close()


def test_a_batched_simulator_names_the_agent_whose_observation_does_not_fit():
    from test_isaaclab import make_task

    env = wrap_env(make_task(num_envs=2))
    env.reset(seed=0)
    task = env.env.unwrapped
    observations = task._get_observations
    task._get_observations = lambda: dict(observations(), second=torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"observation of agent 'second' has shape \(2, 4\), expected \(2, 3\) "
                                         r"\(num_envs, the 3 values of its space Box"):
        env.step({"first": torch.zeros(2, 1), "second": torch.zeros(2, 1)})
    task._get_observations = lambda: dict(observations(), first=torch.zeros(3))
    with pytest.raises(ValueError, match=r"observation of agent 'first' has shape \(3,\), expected \(2, 3\)"):
        env.step({"first": torch.zeros(2, 1), "second": torch.zeros(2, 1)})


class MismatchedTuples(TupleSpacesEnv):
    """Three observation spaces for two action spaces."""

    def __init__(self):
        super().__init__()
        self.observation_space = gymnasium.spaces.Tuple([gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32)] * 3)


def test_a_gymnasium_multi_agent_env_with_tuples_of_different_lengths_is_named():
    with pytest.raises(ValueError, match=r"MismatchedTuples: its observation_space has 3 entries and its action_space 2; "
                                         r"a Gymnasium multi-agent env has one entry per agent in each"):
        wrap_env(MismatchedTuples())
