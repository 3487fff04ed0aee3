"""What the env reports in its infos reaches callbacks per episode, and callbacks log figures of their own."""

import pytest
import torch
from helpers import build_mappo
from test_tracking import read_scalars
from toy_envs import CountingEnv, TupleSpacesEnv

from marlparts.envs import wrap_env
from marlparts.trainers import Callback, SequentialTrainer


class StepCounts(Callback):
    """Keeps what ``on_episode_infos`` receives and logs the mean of ``t`` summed over each episode."""

    def __init__(self):
        self.received = []

    def on_episode_infos(self, trainer, infos):
        self.received.append(infos)
        trainer.log("Env / t summed over the episode", infos["t"].total.mean())


def test_the_env_s_infos_are_carried_per_step_for_the_keys_asked():
    env = wrap_env(lambda: TupleSpacesEnv(limit=3, masks=True), num_envs=2, info_keys=["t", "absent"])
    _, infos = env.reset()
    assert set(infos["env_info"]) == {"t", "absent"}
    for step in (1, 2, 3):
        _, _, _, _, infos = env.step({uid: torch.ones(2, 1, dtype=torch.long) for uid in env.possible_agents})
        assert infos["env_info"]["t"].tolist() == [[float(step)] * 2] * 2  # the step's info, not the reset's
        assert infos["env_info"]["absent"].abs().sum() == 0
    assert infos["episode_end"].all()
    assert "env_info" not in wrap_env(lambda: TupleSpacesEnv(masks=True)).reset()[1]


def test_callbacks_get_each_episode_s_sums_and_last_values_and_log_their_own_figures(tmp_path):
    env = wrap_env(lambda: TupleSpacesEnv(limit=3, masks=True), num_envs=2, info_keys=["t"])
    agent = build_mappo(env, rollouts=3, directory=str(tmp_path),
                        cfg={"experiment": {"experiment_name": "run", "write_interval": 3}})
    callback = StepCounts()
    SequentialTrainer(env=env, agents=agent, callbacks=[callback], cfg={"timesteps": 9, "disable_progressbar": True}).train()
    assert len(callback.received) == 3  # both copies end together every 3 steps
    for infos in callback.received:
        assert infos["t"].total.tolist() == [[6.0, 6.0]] * 2  # 1 + 2 + 3 for each agent of each ended episode
        assert infos["t"].last.tolist() == [[3.0, 3.0]] * 2
    table = read_scalars(tmp_path / "run")
    assert [value for _, value in table["Env / t summed over the episode"]] == [6.0] * 3


def test_an_info_that_is_not_a_number_is_named():
    env = wrap_env(lambda: TupleSpacesEnv(limit=3, masks=True), info_keys=["action_mask"])
    env.reset()
    with pytest.raises(ValueError, match="agent 'agent_0' in env copy 0 hold 'action_mask'.*not a number"):
        env.step({uid: torch.ones(1, 1, dtype=torch.long) for uid in env.possible_agents})


def test_info_keys_must_be_names():
    with pytest.raises(TypeError, match="info_keys must be a sequence of str"):
        wrap_env(lambda: CountingEnv(), info_keys="kills")


def test_evaluation_reports_each_agent_s_mean_of_the_env_s_figures(tmp_path):
    env = wrap_env(lambda: TupleSpacesEnv(limit=3, masks=True), num_envs=2, info_keys=["t"])
    agent = build_mappo(env, rollouts=3, directory=str(tmp_path))
    report = SequentialTrainer(env=env, agents=agent, cfg={"disable_progressbar": True}).eval(episodes=4)
    assert report["env_info"] == {"t": {"agent_0": 6.0, "agent_1": 6.0}}


def test_the_last_value_of_an_agent_that_left_early_is_the_one_of_the_step_it_left(tmp_path):
    env = wrap_env(lambda: TupleSpacesEnv(limit=4, per_agent_done=True, leave_at=2, masks=True), info_keys=["t"])
    callback = StepCounts()
    agent = build_mappo(env, rollouts=4, directory=str(tmp_path))
    SequentialTrainer(env=env, agents=agent, callbacks=[callback], cfg={"timesteps": 4, "disable_progressbar": True}).train()
    (infos,) = callback.received
    assert infos["t"].last.tolist() == [[4.0, 2.0]]  # agent_1 left at step 2
    assert infos["t"].total.tolist() == [[10.0, 3.0]]  # 1 + 2 + 3 + 4; agent_1's infos stop after it left
