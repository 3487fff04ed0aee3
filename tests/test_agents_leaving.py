"""Agents that leave mid-episode: learning where the best play, and so the best return, is known exactly."""

import pytest
import torch
from helpers import build_mappo

from marlparts.envs import wrap_env
from marlparts.trainers import SequentialTrainer
from marlparts.trainers.opponents import random_team
from tests.toy_envs import LeaveBeforeTheStormEnv


@pytest.mark.learning
@pytest.mark.parametrize("algorithm, seed", [("mappo", 1), ("ippo", 2)])
def test_an_agent_learns_when_to_leave_and_the_one_that_stays_plays_on(algorithm, seed, tmp_path):
    torch.manual_seed(seed)
    env = wrap_env(lambda: LeaveBeforeTheStormEnv(), num_envs=16, seed=seed)
    agent = build_mappo(env, share=False, rollouts=12, directory=str(tmp_path), algorithm=algorithm,
                        cfg={"learning_rate": 1e-3, "discount_factor": 0.99})
    # 1000 steps: both algorithms reached the best play on each of seeds 0-7 (at 600 steps, 7 of 8 each)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 1000, "disable_progressbar": True})
    random_play = trainer.eval(200, opponents=random_team(env.possible_agents))["returns"]
    trainer.train()
    learned = trainer.eval(20)["returns"]
    # the best play: the swimmer stays for 3 steps and leaves before the storm (3), the keeper is right at
    # each of the 6 steps, 3 of them after the swimmer has left (6); random play is far from both
    assert learned == {"swimmer": 3.0, "keeper": 6.0}
    assert random_play["swimmer"] < 1.0 and random_play["keeper"] < 3.5
    print(f"{algorithm}: learned {learned}, random {random_play}")
    env.close()
