import gymnasium
import numpy as np
import pytest
import torch
from mpe2 import simple_spread_v3
from toy_envs import ContinuousEnv, CountingEnv

from marlparts.envs import EnvCopyError, wrap_env
from marlparts.trainers.opponents import RandomPolicy


def actions_for(env, value=1):
    return {uid: torch.full((env.num_envs, 1), value, dtype=torch.long) for uid in env.possible_agents}


def test_mpe_shapes_dtypes_and_spaces():
    env = wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25), num_envs=4, seed=0)
    obs, infos = env.reset()
    assert env.possible_agents == ["agent_0", "agent_1", "agent_2"] and env.num_agents == 3
    assert set(obs) == set(env.possible_agents)
    assert obs["agent_1"].shape == (4, 18) and obs["agent_1"].dtype == torch.float32
    assert env.state().shape == (4, 54) and env.state_space.shape == (54,)
    assert env.state_spaces["agent_2"] == env.state_space
    obs, rewards, terminated, truncated, infos = env.step(actions_for(env))
    assert rewards["agent_0"].shape == (4, 1) and rewards["agent_0"].dtype == torch.float32
    assert terminated["agent_0"].dtype == torch.bool and truncated["agent_0"].shape == (4, 1)
    assert infos["active"]["agent_0"].all()
    env.close()


def test_copies_reset_themselves_and_keep_the_final_observation():
    env = wrap_env(lambda: CountingEnv(max_steps=3, leave_at=99), num_envs=2, seed=0)
    env.reset()
    for _ in range(2):
        obs, _, _, truncated, infos = env.step(actions_for(env, 2))
        assert not truncated["agent_0"].any() and not infos["episode_end"].any()
    obs, _, terminated, truncated, infos = env.step(actions_for(env, 2))
    assert truncated["agent_0"].all() and not terminated["agent_0"].any()
    assert infos["episode_end"].all()
    # the final observation of the ended episode: step 3, last action 2
    assert torch.equal(infos["final_observation"]["agent_1"][0], torch.tensor([3.0, 1.0, 2.0]))
    # the returned observation already belongs to the next episode
    assert torch.equal(obs["agent_1"][0], torch.tensor([0.0, 1.0, 0.0]))
    # state(): the env's own state, final state kept at the episode end
    assert torch.equal(infos["final_state"][0], torch.tensor([3.0, 0.0]))
    assert torch.equal(env.state()[0], torch.tensor([0.0, 3.0]))


def test_agent_that_leaves_gets_zero_observation_and_inactive_mask():
    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=2), num_envs=1, seed=0)
    env.reset()
    env.step(actions_for(env))
    obs, rewards, terminated, _, infos = env.step(actions_for(env))
    assert terminated["agent_1"].item() and not terminated["agent_0"].item()
    assert not infos["active"]["agent_1"].item() and infos["active"]["agent_0"].item()
    assert torch.equal(infos["final_observation"]["agent_1"][0], torch.tensor([2.0, 1.0, 1.0]))
    obs, rewards, terminated, _, infos = env.step(actions_for(env))
    assert torch.all(obs["agent_1"] == 0) and rewards["agent_1"].item() == 0.0
    assert not infos["active"]["agent_1"].item() and not terminated["agent_1"].item()


def test_action_masks_come_with_observations():
    env = wrap_env(lambda: CountingEnv(masked=True), num_envs=2, seed=0)
    obs, infos = env.reset()
    assert obs["agent_0"].shape == (2, 3)
    assert infos["action_mask"]["agent_0"].dtype == torch.bool
    assert infos["action_mask"]["agent_0"].all()
    _, _, _, _, infos = env.step(actions_for(env))
    assert torch.equal(infos["action_mask"]["agent_0"][0], torch.tensor([False, True, True, True]))


def test_worker_processes_match_in_process_copies():
    results = []
    for workers in (0, 2):
        env = wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=5), num_envs=4, workers=workers, seed=3)
        obs, _ = env.reset()
        trajectory = [obs.data.clone()]
        generator = torch.Generator().manual_seed(0)
        for _ in range(12):
            actions = {u: torch.randint(0, 5, (4, 1), generator=generator) for u in env.possible_agents}
            obs, rewards, _, truncated, infos = env.step(actions)
            trajectory += [obs.data.clone(), rewards.data.clone(), infos["final_observation"].data.clone()]
        env.close()
        results.append(trajectory)
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_seeded_reset_gives_each_copy_its_own_seed():
    env = wrap_env(lambda: simple_spread_v3.parallel_env(N=3), num_envs=3, seed=10)
    obs, _ = env.reset()
    assert not torch.equal(obs["agent_0"][0], obs["agent_0"][1])
    again = wrap_env(lambda: simple_spread_v3.parallel_env(N=3), num_envs=3, seed=10)
    assert torch.equal(again.reset()[0].data, obs.data)


def test_continuous_actions_are_clipped_to_the_box():
    env = wrap_env(lambda: ContinuousEnv(), num_envs=2, seed=0)
    env.reset()
    _, rewards, _, _, _ = env.step({u: torch.full((2, 2), 5.0) for u in env.possible_agents})
    assert torch.all(rewards["agent_0"] == 1.0)


def test_continuous_actions_that_are_not_real_numbers_are_refused_naming_the_agent():
    env = wrap_env(lambda: ContinuousEnv(), num_envs=2, seed=0)
    env.reset()
    for bad in (torch.full((2, 2), 0.5 + 0.5j), np.full((2, 2), "0.5", dtype=object)):
        actions = {u: torch.full((2, 2), 0.5) for u in env.possible_agents}
        actions["agent_0"] = bad
        with pytest.raises(TypeError, match=r"agent_0.*dtype .*real numbers"):
            env.step(actions)


def test_missing_agent_in_actions_is_named():
    env = wrap_env(lambda: CountingEnv(), num_envs=2)
    env.reset()
    actions = actions_for(env)
    del actions["agent_2"]
    with pytest.raises(KeyError, match="agent_2"):
        env.step(actions)


def test_unknown_agent_in_actions_is_named():
    env = wrap_env(lambda: CountingEnv(), num_envs=2)
    env.reset()
    actions = actions_for(env)
    actions["agent_9"] = actions["agent_0"]
    with pytest.raises(KeyError, match="agent_9"):
        env.step(actions)


def test_wrong_action_shape_names_agent_and_shapes():
    env = wrap_env(lambda: CountingEnv(), num_envs=2)
    env.reset()
    actions = actions_for(env)
    actions["agent_1"] = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"agent_1.*\(2, 3\).*\(2, 1\)"):
        env.step(actions)


def test_nan_observation_names_agent_copy_and_step():
    env = wrap_env(lambda: CountingEnv(nan_at=2, leave_at=99), num_envs=2)
    env.reset()
    env.step(actions_for(env))
    with pytest.raises(ValueError, match=r"observation.*agent_2.*copy 0.*step 2"):
        env.step(actions_for(env))


def test_infinite_reward_names_agent():
    env = wrap_env(lambda: CountingEnv(nan_reward_at=1), num_envs=1)
    env.reset()
    with pytest.raises(ValueError, match=r"reward.*agent_0.*step 1"):
        env.step(actions_for(env))


@pytest.mark.parametrize("workers", [0, 1])
def test_env_raising_in_step_names_the_copy(workers):
    env = wrap_env(lambda: CountingEnv(raise_at=2), num_envs=2, workers=workers)
    env.reset()
    env.step(actions_for(env))
    with pytest.raises(EnvCopyError, match=r"copy 0 raised in step.*simulated failure"):
        env.step(actions_for(env))
    env.close()


def test_several_copies_need_a_factory():
    with pytest.raises(ValueError, match="factory"):
        wrap_env(CountingEnv(), num_envs=2)


def test_render_returns_the_first_copy_frame():
    env = wrap_env(lambda: CountingEnv(render_mode="rgb_array"), num_envs=2, workers=1)
    env.reset()
    env.step(actions_for(env))
    frame = env.render()
    assert isinstance(frame, np.ndarray) and frame.shape == (4, 4, 3) and frame[0, 0, 0] == 1
    env.close()


def test_copy_seeds_of_different_run_seeds_share_no_stream():
    seeds = {}
    for run_seed in range(5):
        env = wrap_env(lambda: CountingEnv(), num_envs=64, seed=run_seed)
        env.reset()
        seeds[run_seed] = [copy.seed_used for copy in env.copies.block.envs]
        assert env.copy_seeds == seeds[run_seed]
    every = [seed for values in seeds.values() for seed in values]
    assert len(set(every)) == len(every), "two copies (of the same or of different run seeds) share a seed"


def test_copy_seeds_are_the_same_with_worker_processes():
    in_process = wrap_env(lambda: simple_spread_v3.parallel_env(N=3), num_envs=4, seed=5)
    workers = wrap_env(lambda: simple_spread_v3.parallel_env(N=3), num_envs=4, workers=2, seed=5)
    assert torch.equal(in_process.reset()[0].data, workers.reset()[0].data)
    workers.close()


@pytest.mark.parametrize("state_source", ["env", "observations"])
def test_final_state_of_an_agent_truncated_mid_episode_is_the_current_one(state_source):
    # agent_1 is truncated at step 2 while the copy goes on; episodes last 4 steps
    env = wrap_env(lambda: CountingEnv(max_steps=4, leave_at=2, leave_by="truncated"), num_envs=1, seed=0,
                   state_source=state_source)
    env.reset()
    for step in range(1, 7):  # the whole first episode, then step 2 of the second
        obs, _, _, truncated, infos = env.step(actions_for(env, 1))
        if step == 6:
            assert truncated["agent_1"].item() and not infos["episode_end"].item()
            if state_source == "env":
                assert torch.equal(infos["final_state"][0], torch.tensor([2.0, 2.0]))  # [step, agents left]
            else:  # all observations concatenated, agent_1's being its final one
                expected = torch.cat([obs["agent_0"][0], infos["final_observation"]["agent_1"][0], obs["agent_2"][0]])
                assert torch.equal(infos["final_state"][0], expected)
        elif not truncated.data.any():
            assert not infos["final_state"].any(), f"stale final state at step {step}"


def test_actions_of_the_wrong_type_are_named():
    env = wrap_env(lambda: CountingEnv(), num_envs=2)
    env.reset()
    actions = actions_for(env)
    actions["agent_0"] = 1
    with pytest.raises(TypeError, match=r"agent_0.*int"):
        env.step(actions)
    actions = actions_for(env)
    actions["agent_1"] = torch.ones(2, 1)
    with pytest.raises(TypeError, match=r"agent_1.*float32.*Discrete"):
        env.step(actions)
    actions = actions_for(env)
    actions["agent_2"] = torch.full((2, 1), 7)
    with pytest.raises(ValueError, match=r"agent_2.*7.*Discrete\(4\)"):
        env.step(actions)
    # NumPy arrays of the right shape are taken as they are
    actions = {uid: np.ones((2, 1), dtype=np.int64) for uid in env.possible_agents}
    _, rewards, _, _, _ = env.step(actions)
    assert torch.all(rewards["agent_0"] == 1.0)


@pytest.mark.parametrize("value", [5, -1])
def test_an_integer_action_outside_its_space_names_the_agent_the_copy_and_the_value(value):
    env = wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25), num_envs=3, seed=0)
    env.reset()
    actions = {uid: torch.zeros(3, 1, dtype=torch.long) for uid in env.possible_agents}
    actions["agent_1"][2, 0] = value  # Discrete(5): 0..4
    with pytest.raises(ValueError, match=rf"agent 'agent_1' in env copy 2 is {value}, outside its action space "
                                         r"Discrete\(5\)"):
        env.step(actions)
    actions["agent_1"][2, 0] = 4
    env.step(actions)  # the largest action is inside


class ShiftedActionsEnv(CountingEnv):
    """CountingEnv whose integer action spaces do not start at 0; it keeps every action it is given."""

    SPACES = {"agent_0": gymnasium.spaces.Discrete(4, start=-2),
              "agent_1": gymnasium.spaces.MultiDiscrete([2, 3], start=[1, -1]),
              "agent_2": gymnasium.spaces.Discrete(4)}

    def __init__(self):
        super().__init__(max_steps=50, leave_at=100)
        self.received = []

    def action_space(self, agent):
        return self.SPACES[agent]

    def step(self, actions):
        for uid, action in actions.items():
            assert self.SPACES[uid].contains(np.asarray(action, dtype=np.int64)), (uid, action)
        self.received.append(actions)
        return super().step({uid: 0.0 for uid in actions})


def test_integer_actions_are_indexes_from_zero_and_the_env_gets_them_shifted_by_its_start():
    copy = ShiftedActionsEnv()
    env = wrap_env(copy, num_envs=1, seed=0)
    assert env.action_space("agent_0") == gymnasium.spaces.Discrete(4)
    assert env.action_space("agent_1") == gymnasium.spaces.MultiDiscrete([2, 3])
    env.reset()
    env.step({"agent_0": torch.tensor([[3]]), "agent_1": torch.tensor([[1, 2]]), "agent_2": torch.tensor([[3]])})
    env.step({"agent_0": torch.tensor([[0]]), "agent_1": torch.tensor([[0, 0]]), "agent_2": torch.tensor([[0]])})
    first, second = copy.received
    assert first["agent_0"] == 1 and first["agent_1"].tolist() == [2, 1] and first["agent_2"] == 3
    assert second["agent_0"] == -2 and second["agent_1"].tolist() == [1, -1] and second["agent_2"] == 0
    for outside in ([[2, 0]], [[0, 3]], [[-1, 0]]):
        with pytest.raises(ValueError, match=r"agent 'agent_1' in env copy 0 is -?\d, outside its action space "
                                             r"MultiDiscrete\(\[2 3\]\)"):
            env.step({"agent_0": torch.tensor([[0]]), "agent_1": torch.tensor(outside),
                      "agent_2": torch.tensor([[0]])})


def test_random_actions_of_a_multidiscrete_space_with_a_start_lie_in_that_space():
    space = gymnasium.spaces.MultiDiscrete([2, 3], start=[1, -1])
    actions = RandomPolicy(space, seed=0)(torch.zeros(400, 1))
    assert sorted(set(actions[:, 0].tolist())) == [1, 2]
    assert sorted(set(actions[:, 1].tolist())) == [-1, 0, 1]
