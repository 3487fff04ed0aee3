"""Gymnasium multi-agent envs (tuple spaces, reward lists, one done): the adapter and the batched wrapper."""

import importlib.util
import itertools
import pathlib

import gymnasium
import numpy as np
import pytest
import torch
from toy_envs import CountingEnv, TupleSpacesEnv

from marlparts.envs import GymnasiumMultiAgentEnv, wrap_env
from marlparts.envs.gymnasium_multiagent import env_time_limit, is_gymnasium_multi_agent

ROOT = pathlib.Path(__file__).resolve().parent.parent


def actions_of(env, value):
    return {uid: torch.full((env.num_envs, 1), value, dtype=torch.long) for uid in env.possible_agents}


def flags(mapping):
    return {uid: mapping[uid].flatten().tolist() for uid in mapping}


def test_tuple_space_envs_are_told_apart_from_pettingzoo_and_single_agent_envs():
    assert is_gymnasium_multi_agent(TupleSpacesEnv())
    assert not is_gymnasium_multi_agent(CountingEnv())
    assert not is_gymnasium_multi_agent(gymnasium.make("CartPole-v1"))
    with pytest.raises(TypeError, match="not a Gymnasium multi-agent env.*Tuple"):
        GymnasiumMultiAgentEnv(gymnasium.make("CartPole-v1"))


def test_agents_spaces_rewards_and_observations_come_per_agent():
    env = wrap_env(lambda: TupleSpacesEnv(limit=10), num_envs=2)
    assert env.possible_agents == ["agent_0", "agent_1"]
    assert env.action_space("agent_1") == gymnasium.spaces.Discrete(3)
    observations, infos = env.reset()
    assert observations["agent_1"].tolist() == [[0.0, 1.0]] * 2
    observations, rewards, terminated, truncated, infos = env.step({"agent_0": torch.tensor([[2], [1]]),
                                                                    "agent_1": torch.tensor([[0], [2]])})
    assert rewards["agent_0"].flatten().tolist() == [2.0, 1.0]
    assert rewards["agent_1"].flatten().tolist() == [1.0, 3.0]  # its action + 1
    assert observations["agent_0"].tolist() == [[1.0, 0.0]] * 2
    assert env.state().tolist() == [[1.0, 0.0, 1.0, 1.0]] * 2  # no state(): the observations concatenated


def test_the_env_s_own_step_limit_ends_episodes_as_truncated_not_terminated():
    env = wrap_env(lambda: GymnasiumMultiAgentEnv(TupleSpacesEnv(limit=3), time_limit=3), num_envs=1)
    env.reset()
    for _ in range(2):
        _, _, terminated, truncated, infos = env.step(actions_of(env, 1))
        assert not infos["episode_end"].any()
    observations, _, terminated, truncated, infos = env.step(actions_of(env, 1))
    assert infos["episode_end"].all()
    assert flags(terminated) == {"agent_0": [False], "agent_1": [False]}
    assert flags(truncated) == {"agent_0": [True], "agent_1": [True]}
    assert infos["final_observation"]["agent_1"].tolist() == [[3.0, 1.0]]  # bootstrapped from
    assert observations["agent_1"].tolist() == [[0.0, 1.0]]  # the next episode's first


def test_without_a_time_limit_the_env_s_done_is_a_termination():
    env = wrap_env(lambda: GymnasiumMultiAgentEnv(TupleSpacesEnv(limit=2), time_limit=None), num_envs=1)
    env.reset()
    env.step(actions_of(env, 0))
    _, _, terminated, truncated, infos = env.step(actions_of(env, 0))
    assert infos["episode_end"].all()
    assert flags(terminated) == {"agent_0": [True], "agent_1": [True]}
    assert flags(truncated) == {"agent_0": [False], "agent_1": [False]}


def test_a_time_limit_shorter_than_the_env_s_cuts_the_episode():
    env = wrap_env(lambda: GymnasiumMultiAgentEnv(TupleSpacesEnv(limit=100), time_limit=2), num_envs=1)
    env.reset()
    env.step(actions_of(env, 0))
    _, _, terminated, truncated, infos = env.step(actions_of(env, 0))
    assert infos["episode_end"].all()
    assert flags(truncated) == {"agent_0": [True], "agent_1": [True]}


def test_the_time_limit_is_read_from_the_registration():
    pytest.importorskip("lbforaging")
    assert env_time_limit(gymnasium.make("Foraging-8x8-2p-2f-coop-v3")) == 50
    pytest.importorskip("rware")
    assert env_time_limit(gymnasium.make("rware-tiny-2ag-v2")) == 500
    assert env_time_limit(gymnasium.make("CartPole-v1")) == 500  # Gymnasium's TimeLimit
    assert env_time_limit(TupleSpacesEnv()) is None  # made without a spec


def test_an_agent_done_before_the_others_leaves_and_the_env_gets_its_idle_action():
    raw = TupleSpacesEnv(limit=4, per_agent_done=True, leave_at=2)
    adapter = GymnasiumMultiAgentEnv(raw, time_limit=None)
    env = wrap_env(adapter)
    env.reset()
    env.step(actions_of(env, 2))
    _, rewards, terminated, _, infos = env.step(actions_of(env, 2))
    assert flags(terminated) == {"agent_0": [False], "agent_1": [True]}
    assert infos["active"]["agent_1"].flatten().tolist() == [False]
    assert not infos["episode_end"].any()
    _, rewards, terminated, _, infos = env.step(actions_of(env, 2))
    assert raw.received[-1] == (2, 0)  # agent_1 is gone: the env receives action 0 for it
    assert rewards["agent_1"].flatten().tolist() == [0.0]  # and nothing of its reward reaches the agent
    _, _, terminated, _, infos = env.step(actions_of(env, 2))
    assert infos["episode_end"].all() and flags(terminated)["agent_0"] == [True]


def test_old_gym_four_values_and_a_shared_reward_are_understood():
    env = wrap_env(lambda: GymnasiumMultiAgentEnv(TupleSpacesEnv(limit=1, old_api=True, shared_reward=True),
                                                  time_limit=None))
    env.reset()
    _, rewards, terminated, truncated, infos = env.step({"agent_0": torch.tensor([[1]]), "agent_1": torch.tensor([[2]])})
    assert rewards["agent_0"].item() == rewards["agent_1"].item() == 3.0
    assert infos["episode_end"].all() and flags(terminated) == {"agent_0": [True], "agent_1": [True]}


def test_masks_in_the_env_s_info_become_action_masks():
    env = wrap_env(lambda: TupleSpacesEnv(limit=10, masks=True), num_envs=2)
    _, infos = env.reset()
    assert infos["action_mask"]["agent_0"].tolist() == [[True, True, True]] * 2
    _, _, _, _, infos = env.step(actions_of(env, 1))
    assert infos["action_mask"]["agent_1"].tolist() == [[False, True, True]] * 2  # odd step: action 0 forbidden


def test_a_mask_function_overrides_what_the_env_says():
    def only_two(raw_env):
        return [np.array([False, False, True])] * 2

    env = wrap_env(lambda: GymnasiumMultiAgentEnv(TupleSpacesEnv(masks=True), action_masks=only_two))
    _, infos = env.reset()
    assert infos["action_mask"]["agent_0"].tolist() == [[False, False, True]]


def test_the_env_s_state_is_the_global_state_where_it_has_one():
    env = wrap_env(lambda: TupleSpacesEnv(limit=10, with_state=True), num_envs=2)
    env.reset()
    env.step(actions_of(env, 0))
    assert env.state().tolist() == [[1.0, 10.0]] * 2


def test_the_copies_also_run_in_worker_processes():
    env = wrap_env(lambda: TupleSpacesEnv(limit=3), num_envs=4, workers=2)
    try:
        env.reset()
        ends = 0
        for _ in range(6):
            _, rewards, _, truncated, infos = env.step(actions_of(env, 1))
            ends += int(infos["episode_end"].sum())
        assert ends == 8 and rewards["agent_1"].flatten().tolist() == [2.0] * 4
    finally:
        env.close()


@pytest.mark.parametrize("name, agents, limit", [("Foraging-8x8-2p-2f-coop-v3", 2, 50), ("rware-tiny-2ag-v2", 2, 500)])
def test_lbf_and_rware_step_with_random_actions_and_end_episodes(name, agents, limit):
    pytest.importorskip("lbforaging" if name.startswith("Foraging") else "rware")
    __import__("lbforaging" if name.startswith("Foraging") else "rware")
    env = wrap_env(gymnasium.make(name, disable_env_checker=True), seed=3)
    assert env.num_agents == agents
    env.reset()
    generator = torch.Generator().manual_seed(0)
    steps = 0
    while steps < limit:
        actions = {uid: torch.randint(0, space.n, (1, 1), generator=generator) for uid, space in env.action_spaces.items()}
        _, _, terminated, truncated, infos = env.step(actions)
        steps += 1
        if infos["episode_end"].any():
            break
    assert infos["episode_end"].all()
    if steps == limit:  # ended by the step limit: a truncation
        assert all(flag for flag in flags(truncated).values() for flag in flag)


class OldGymTimeLimit(TupleSpacesEnv):
    """gym's old TimeLimit: ``done`` and ``info["TimeLimit.truncated"]`` at step 3, before the env's own end."""

    def step(self, actions):
        observations, rewards, done, info = super().step(actions)
        if self.t >= 3:
            info = {**info, "TimeLimit.truncated": not done}
            done = True
        return observations, rewards, done, info


class ResetWithoutInfo(TupleSpacesEnv):
    """An older env whose reset returns the observations only."""

    def reset(self, seed=None, options=None):
        return super().reset(seed=seed)[0]


def test_a_time_limit_of_old_gym_is_a_truncation_not_a_termination():
    env = wrap_env(lambda: GymnasiumMultiAgentEnv(OldGymTimeLimit(limit=100, old_api=True), time_limit=None))
    env.reset()
    for _ in range(3):
        _, _, terminated, truncated, infos = env.step(actions_of(env, 0))
    assert infos["episode_end"].all()
    assert flags(terminated) == {"agent_0": [False], "agent_1": [False]}
    assert flags(truncated) == {"agent_0": [True], "agent_1": [True]}


def test_a_longer_registered_time_limit_does_not_hide_the_env_s_own():
    pytest.importorskip("lbforaging")
    longer = gymnasium.make("Foraging-8x8-2p-2f-coop-v3", max_episode_steps=100)  # LBF still ends at its own 50
    assert env_time_limit(longer) == 50
    env = wrap_env(longer, seed=0)
    env.reset()
    for step in range(1, 51):
        _, _, terminated, truncated, infos = env.step(actions_of(env, 0))  # no-ops: nothing is ever collected
        assert bool(infos["episode_end"].all()) == (step == 50)
    assert flags(truncated) == {"agent_0": [True], "agent_1": [True]}
    assert flags(terminated) == {"agent_0": [False], "agent_1": [False]}


def test_a_reset_that_returns_only_the_observations_of_two_agents_is_read_as_such():
    env = wrap_env(lambda: GymnasiumMultiAgentEnv(ResetWithoutInfo(), time_limit=None))
    observations, _ = env.reset()
    assert observations["agent_1"].tolist() == [[0.0, 1.0]]


@pytest.mark.parametrize("name", ["foraging_mappo", "foraging_vdn"])
def test_the_lbf_examples_act_greedily_among_legal_moves_only(name, tmp_path):
    """LBF turns an illegal move into standing still: a greedy agent that prefers one would stand still for good,
    so the wrapper masks the moves LBF refuses and the examples act among the legal ones."""
    pytest.importorskip("lbforaging")
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / "lbf" / f"{name}.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    env = example.make_env(num_envs=2, seed=0)
    agent = example.make_agent(env, str(tmp_path))
    agent.set_mode("eval")
    observations, infos = env.reset()
    for _ in range(30):
        actions = agent.act(observations, env.state(), infos, 0, 0)
        for uid, action in actions.items():
            assert infos["action_mask"][uid].gather(1, action.long()).all(), f"{uid} chose an illegal move"
        observations, _, _, _, infos = env.step(actions)
    env.close()


@pytest.mark.parametrize("task", ["Foraging-10x10-3p-3f-v3", "Foraging-2s-15x15-4p-3f-v3"])
def test_lbf_legal_moves_per_player_are_exactly_those_of_lbf_s_joint_enumeration(task):
    pytest.importorskip("lbforaging")
    from marlparts.envs.lbf import lbf_action_masks

    env = gymnasium.make(task, disable_env_checker=True)
    rng = np.random.default_rng(0)
    checked = set()
    for episode in range(5):
        env.reset(seed=episode)
        done = False
        while not done:
            masks = lbf_action_masks(env)
            joint = {tuple(int(action.value) for action in actions) for actions in env.unwrapped.get_valid_actions()}
            per_player = [np.flatnonzero(mask).tolist() for mask in masks]
            assert joint == set(itertools.product(*per_player))
            checked.update(action for actions in per_player for action in actions)
            _, _, done, _, _ = env.step(rng.integers(0, 6, size=masks.shape[0]).tolist())
    assert checked == set(range(6))  # every move was both legal and, at the walls or food, refused somewhere


def test_lbf_envs_come_with_their_legal_moves_as_action_masks():
    pytest.importorskip("lbforaging")
    env = wrap_env(lambda: gymnasium.make("Foraging-8x8-2p-2f-coop-v3", disable_env_checker=True), num_envs=2, seed=0)
    _, infos = env.reset()
    masks = infos["action_mask"]
    assert set(masks) == {"agent_0", "agent_1"} and masks["agent_0"].shape == (2, 6)
    assert masks["agent_0"][:, 0].all()  # doing nothing is always legal
    assert not masks["agent_0"].all()  # and something is refused somewhere (a wall, or no food to load)
    env.close()


def lbf_with_one_food_next_to_agent_0():
    """The adapter of a reset LBF env whose field holds only one food, of level 1, beside agent 0."""
    pytest.importorskip("lbforaging")
    __import__("lbforaging")
    adapter = GymnasiumMultiAgentEnv(gymnasium.make("Foraging-8x8-2p-1f-v3", disable_env_checker=True))
    adapter.reset(seed=0)
    raw = adapter.env.unwrapped
    raw.field[:] = 0
    row, col = raw.players[0].position
    taken = {tuple(player.position) for player in raw.players}
    free = next((r, c) for r, c in ((row - 1, col), (row + 1, col), (row, col - 1), (row, col + 1))
                if 0 <= r < raw.rows and 0 <= c < raw.cols and (r, c) not in taken)
    raw.field[free] = 1
    return adapter


def test_the_last_food_eaten_at_the_step_limit_ends_lbf_s_episode_as_terminated():
    adapter = lbf_with_one_food_next_to_agent_0()
    assert adapter.time_limit == 50
    for _ in range(49):
        adapter.step({"agent_0": 0, "agent_1": 0})  # no-ops: the food waits
    _, rewards, terminated, truncated, _ = adapter.step({"agent_0": 5, "agent_1": 0})  # step 50: agent 0 loads it
    assert rewards["agent_0"] > 0 and not adapter.env.unwrapped.field.any()
    assert terminated == {"agent_0": True, "agent_1": True}
    assert truncated == {"agent_0": False, "agent_1": False}


def test_lbf_s_step_limit_with_food_left_is_still_a_truncation():
    adapter = lbf_with_one_food_next_to_agent_0()
    for _ in range(50):
        _, _, terminated, truncated, _ = adapter.step({"agent_0": 0, "agent_1": 0})
    assert terminated == {"agent_0": False, "agent_1": False}
    assert truncated == {"agent_0": True, "agent_1": True}


def test_a_function_of_the_env_tells_its_own_end_from_its_step_limit():
    finished = GymnasiumMultiAgentEnv(TupleSpacesEnv(limit=3), time_limit=3, episode_finished=lambda env: env.t == 3)
    cut = GymnasiumMultiAgentEnv(TupleSpacesEnv(limit=3), time_limit=3, episode_finished=lambda env: False)
    for adapter, ended_by_the_env in ((finished, True), (cut, False)):
        adapter.reset()
        for _ in range(3):
            _, _, terminated, truncated, _ = adapter.step({"agent_0": 0, "agent_1": 0})
        assert terminated == {"agent_0": ended_by_the_env, "agent_1": ended_by_the_env}
        assert truncated == {"agent_0": not ended_by_the_env, "agent_1": not ended_by_the_env}


class RegisteredEndsAtStepTwo(TupleSpacesEnv):
    """Ends its episodes itself (``done``) at step 2, long before its own registered step limit of 50."""

    def __init__(self):
        super().__init__(limit=2)
        self.spec = gymnasium.envs.registration.EnvSpec("EndsAtStepTwo-v0", entry_point=None, kwargs={"max_steps": 50})


def test_an_end_before_the_env_s_own_limit_is_a_termination_even_at_a_shorter_time_limit():
    adapter = GymnasiumMultiAgentEnv(RegisteredEndsAtStepTwo(), time_limit=2)
    adapter.reset()
    adapter.step({"agent_0": 0, "agent_1": 0})
    _, _, terminated, truncated, _ = adapter.step({"agent_0": 0, "agent_1": 0})
    assert terminated == {"agent_0": True, "agent_1": True}
    assert truncated == {"agent_0": False, "agent_1": False}


def test_an_env_limited_by_gymnasium_s_time_limit_alone_is_trusted_with_its_terminations():
    env = RegisteredEndsAtStepTwo()
    env.spec = gymnasium.envs.registration.EnvSpec("EndsAtStepTwo-v0", entry_point=None, max_episode_steps=2)
    adapter = GymnasiumMultiAgentEnv(env)
    assert adapter.time_limit == 2
    adapter.reset()
    adapter.step({"agent_0": 0, "agent_1": 0})
    _, _, terminated, truncated, _ = adapter.step({"agent_0": 0, "agent_1": 0})
    assert terminated == {"agent_0": True, "agent_1": True}
    assert truncated == {"agent_0": False, "agent_1": False}
