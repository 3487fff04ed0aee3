"""Env copies that raise or die: rebuilt, their episode dropped from storage and statistics, up to a limit."""

import pytest
import torch
from helpers import build_mappo

from marlparts.envs import EnvCopyError, wrap_env
from marlparts.trainers import Callback, SequentialTrainer
from tests.test_maddpg import build as build_maddpg
from tests.toy_envs import FlakyEnv


class EpisodeLengths(Callback):
    """Keeps the length of every episode the trainer counted."""

    def __init__(self):
        self.lengths = []

    def on_episode_end(self, trainer, returns, lengths):
        self.lengths.extend(lengths.tolist())


def flaky_env(num_envs=3, workers=0, max_env_failures=2, **kwargs):
    FlakyEnv.episodes_started, FlakyEnv.failed_episode = 0, None
    # the probe copy plays episode 1, copy 0 episode 2, copy 1 episode 3, ...: copy 1 fails in its first episode
    return wrap_env(lambda: FlakyEnv(**kwargs), num_envs=num_envs, workers=workers, seed=0,
                    max_env_failures=max_env_failures)


def stored_episode_ids(agent):
    """The episode ids of every stored step that an agent was active at."""
    memory = agent.groups[0].memory
    observations, active = memory.get_tensor_by_name("observations"), memory.get_tensor_by_name("active")
    return set(observations[..., 0][active.squeeze(-1)].tolist())


@pytest.mark.parametrize("algorithm", ["mappo", "maddpg"])
def test_a_copy_that_raises_is_rebuilt_and_none_of_its_episode_is_stored_or_counted(algorithm, tmp_path):
    env = flaky_env(fail_episode=3, fail_at=3)
    if algorithm == "mappo":
        agent = build_mappo(env, directory=str(tmp_path), rollouts=12)
    else:
        agent = build_maddpg(env, memory_size=12, cfg={"learning_starts": 100})
    counted = EpisodeLengths()
    trainer = SequentialTrainer(env=env, agents=agent, callbacks=[counted],
                                cfg={"timesteps": 11, "disable_progressbar": True})
    with pytest.warns(RuntimeWarning, match=r"env copy 1 raised in step: RuntimeError\('simulated failure in episode 3'\)"
                                            r".*rebuilt and its episode dropped \(failure 1 of at most 2\)"):
        trainer.train()
    assert FlakyEnv.failed_episode == 3 and env.env_failures == 1
    stored = stored_episode_ids(agent)
    assert 3 not in stored and {2, 4} <= stored  # the other copies' episodes are kept, the failed one is gone
    assert len(counted.lengths) >= 4 and set(counted.lengths) == {5}  # the 2-step failed episode was never counted
    env.close()


def test_past_the_limit_the_original_error_is_raised():
    env = flaky_env(fail_episode=3, fail_at=1, max_env_failures=1)
    env.reset()
    first = env.copies.block.envs[0]
    first.fail_episode = first.episode  # copy 0 fails at the same step as copy 1
    actions = {uid: torch.zeros(3, 1, dtype=torch.long) for uid in env.possible_agents}
    with pytest.raises(EnvCopyError, match=r"failed 2 times, more than max_env_failures=1") as raised:
        with pytest.warns(RuntimeWarning, match="env copy 0 raised in step"):
            env.step(actions)
    assert isinstance(raised.value.__cause__, RuntimeError)  # the env's own error, with its traceback
    assert str(raised.value.__cause__) == "simulated failure in episode 3"
    env.close()


def test_a_copy_whose_rebuilt_env_cannot_reset_is_an_error():
    env = flaky_env(num_envs=1, fail_episode=2, fail_at=1)
    env.reset()
    env.copies.block.factory = lambda: FlakyEnv(reset_fails=True)
    with pytest.raises(EnvCopyError, match="was rebuilt after it raised in step, and the new copy raised in reset"):
        env.step({uid: torch.zeros(1, 1, dtype=torch.long) for uid in env.possible_agents})


def test_a_worker_process_that_dies_is_started_again_and_its_episodes_are_dropped(tmp_path):
    marker = tmp_path / "died"
    env = flaky_env(num_envs=4, workers=2, fail_episode=4, fail_at=2, how="exit", marker=str(marker))
    # in each worker the copies' episode ids count from the probe's: worker 0 plays 2, 3, ...; worker 1 the same
    agent = build_mappo(env, directory=str(tmp_path), rollouts=12)
    counted = EpisodeLengths()
    trainer = SequentialTrainer(env=env, agents=agent, callbacks=[counted],
                                cfg={"timesteps": 12, "disable_progressbar": True})
    with pytest.warns(RuntimeWarning, match=r"worker \d, which steps env copies \[\d, \d\], died during step"):
        trainer.train()
    assert marker.exists() and env.env_failures == 2  # both copies of the dead worker
    assert set(counted.lengths) == {5}
    env.close()


def test_failures_need_a_factory_and_a_valid_limit():
    with pytest.raises(ValueError, match="max_env_failures needs a factory"):
        wrap_env(FlakyEnv(), max_env_failures=1)
    with pytest.raises(ValueError, match="max_env_failures must be an int >= 0"):
        wrap_env(lambda: FlakyEnv(), max_env_failures=-1)


@pytest.mark.parametrize("algorithm", ["qmix", "vdn"])
def test_value_decomposition_learns_nothing_from_the_steps_of_a_dropped_episode(algorithm):
    from test_value_decomposition import QMIX, VDN
    from test_value_decomposition import build as build_value_decomposition

    torch.manual_seed(0)
    env = flaky_env(fail_episode=3, fail_at=3)
    agent = build_value_decomposition(env, algorithm=QMIX if algorithm == "qmix" else VDN, cfg={"learning_starts": 1000})
    with pytest.warns(RuntimeWarning):
        SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 11, "disable_progressbar": True}).train()
    memory = agent.groups[0].memory
    active = memory.get_tensor_by_name("active").flatten(0, 1).squeeze(-1)       # (rows, agents)
    dropped = torch.nonzero(~active.any(-1)).flatten()
    dropped = dropped[dropped < len(memory)]
    assert len(dropped) == 3 and set(memory.get_tensor_by_name("observations").flatten(0, 1)[dropped][:, 0, 0].tolist()) == {3}
    names = agent.replay_names()
    batches = []
    for group in agent.groups:
        batch = dict(zip(names, group.memory.sample_by_index(names, dropped)))
        batch["observations"] = agent._observations(group, batch["observations"])
        batch["next_observations"] = agent._observations(group, batch["next_observations"])
        batches.append(batch)
    before = [parameter.clone() for record in agent.trained for parameter in record.model.parameters()]
    agent.gradient_update(batches)
    after = [parameter for record in agent.trained for parameter in record.model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    env.close()


def test_a_rebuilt_copy_draws_its_seed_from_the_runs_seed():
    seeds = []
    for run_seed in (0, 123, 0):
        FlakyEnv.episodes_started = 0
        env = wrap_env(lambda: FlakyEnv(fail_episode=3, fail_at=1), num_envs=2, seed=run_seed, max_env_failures=1)
        env.reset()
        with pytest.warns(RuntimeWarning, match="env copy 1 raised in step"):
            env.step({uid: torch.zeros(2, 1, dtype=torch.long) for uid in env.possible_agents})
        seeds.append(env.copies.block.envs[1].seed_used)
        env.close()
    assert seeds[0] is not None and seeds[0] == seeds[2] != seeds[1]


def test_a_reset_that_fails_after_a_whole_episode_keeps_that_episode(tmp_path):
    env = flaky_env(fail_reset_of=3)  # copy 1 plays episode 3 whole, then its reset raises
    agent = build_mappo(env, directory=str(tmp_path), rollouts=12)
    counted = EpisodeLengths()
    trainer = SequentialTrainer(env=env, agents=agent, callbacks=[counted],
                                cfg={"timesteps": 6, "disable_progressbar": True})
    with pytest.warns(RuntimeWarning, match=r"env copy 1 raised in reset: RuntimeError\('simulated reset failure'\)"):
        trainer.train()
    assert env.env_failures == 1
    assert counted.lengths == [5, 5, 5]  # every copy's first episode is counted, copy 1's included
    assert 3 in stored_episode_ids(agent)  # and stored
    env.close()
