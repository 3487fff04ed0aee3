"""An env whose ``state()`` raises goes through the same failure path as one that raises in ``step``/``reset``."""

import pytest
import torch
from helpers import build_mappo

from marlparts.envs import EnvCopyError, wrap_env
from marlparts.trainers import SequentialTrainer
from tests.test_env_failures import stored_episode_ids
from tests.toy_envs import FlakyEnv


class StateFailsEnv(FlakyEnv):
    """FlakyEnv whose ``state()`` raises in episode ``fail_state_episode`` once step ``fail_state_at`` is taken
    (MAgent2's does once a team is wiped out).
    """

    def __init__(self, fail_state_episode=3, fail_state_at=2):
        super().__init__()
        self.fail_state_episode, self.fail_state_at = fail_state_episode, fail_state_at

    def state(self):
        if self.episode == self.fail_state_episode and self.t == self.fail_state_at:
            raise ValueError("simulated state() failure")
        return super().state()


def state_failing_env(max_env_failures, **kwargs):
    FlakyEnv.episodes_started, FlakyEnv.failed_episode = 0, None
    # the probe copy plays episode 1, copy 0 episode 2, copy 1 episode 3: copy 1 fails in its first episode
    return wrap_env(lambda: StateFailsEnv(**kwargs), num_envs=3, seed=0, max_env_failures=max_env_failures)


def test_a_copy_whose_state_raises_is_rebuilt_and_its_episode_dropped(tmp_path):
    env = state_failing_env(max_env_failures=2)
    agent = build_mappo(env, directory=str(tmp_path), rollouts=12)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 11, "disable_progressbar": True})
    with pytest.warns(RuntimeWarning, match=r"env copy 1 raised in state\(\): ValueError\('simulated state\(\) failure'\)"
                                            r".*rebuilt and its episode dropped \(failure 1 of at most 2\)"):
        trainer.train()
    assert env.env_failures == 1
    stored = stored_episode_ids(agent)
    assert 3 not in stored and {2, 4} <= stored
    env.close()


def test_a_state_that_raises_at_the_end_of_an_episode_is_an_env_copy_error_naming_the_copy():
    env = state_failing_env(max_env_failures=0, fail_state_at=5)  # the step that ends the episode (5 steps)
    env.reset()
    actions = {uid: torch.zeros(env.num_envs, 1, dtype=torch.long) for uid in env.possible_agents}
    with pytest.raises(EnvCopyError, match=r"env copy 1 raised in state\(\): ValueError\('simulated state\(\) failure'\)"):
        for _ in range(5):
            env.step(actions)
    env.close()


def test_a_magent2_battle_runs_whole_episodes_without_reading_the_env_s_state():
    battle_v4 = pytest.importorskip("magent2.environments.battle_v4")
    from pettingzoo.utils import BaseParallelWrapper

    class StateRaises(BaseParallelWrapper):
        """MAgent2's state() raises once a team is wiped out; this one always does."""

        def state(self):
            raise ValueError("state() is not to be called")

    env = wrap_env(lambda: StateRaises(battle_v4.parallel_env(map_size=12, max_cycles=4)), num_envs=2, seed=0,
                   state_source="observations")
    env.reset()
    ended = 0
    for _ in range(9):
        actions = {uid: torch.randint(0, int(env.action_space(uid).n), (2, 1)) for uid in env.possible_agents}
        _, _, _, _, infos = env.step(actions)
        ended += int(infos["episode_end"].sum())
    assert ended == 4 and env.state().shape == (2, env.state_space.shape[0])
    env.close()
