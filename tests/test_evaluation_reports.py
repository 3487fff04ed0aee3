"""What trainer.eval() reports, whoever plays the seats."""

import json
import pathlib

import pytest
import torch
from helpers import build_mappo
from toy_envs import CountingEnv

from marlparts.envs import wrap_env
from marlparts.trainers import SequentialTrainer
from marlparts.trainers.opponents import random_team


def counting(num_envs=2):
    return wrap_env(lambda: CountingEnv(max_steps=4, leave_at=99), num_envs=num_envs, seed=0)


def test_an_evaluation_with_every_seat_played_by_opponents_reports_the_mean_return_over_every_seat(tmp_path):
    env = counting()
    agent = build_mappo(env, directory=str(tmp_path))
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 4, "disable_progressbar": True})
    report = trainer.eval(episodes=6, opponents=random_team(env.possible_agents))
    assert report["teams"] == {} and sorted(report["opponents"]) == sorted(env.possible_agents)
    # CountingEnv rewards each agent its action: random actions give a positive return
    per_agent = torch.tensor([report["returns"][uid] for uid in env.possible_agents])
    assert report["mean_return"] == pytest.approx(float(per_agent.mean()))
    assert report["mean_return"] > 0.0 and report["std_return"] >= 0.0


def test_an_evaluation_of_one_algorithm_reports_its_own_seats_at_the_top_level(tmp_path):
    env = counting()
    agent = build_mappo(env, directory=str(tmp_path))
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 4, "disable_progressbar": True})
    report = trainer.eval(episodes=4, opponents=random_team(["agent_2"]))
    (team,) = report["teams"].values()
    assert report["mean_return"] == team["mean_return"]
    assert sorted(team["returns"]) == ["agent_0", "agent_1"]


def test_an_evaluation_where_the_algorithm_played_no_seat_leaves_its_evaluation_report_as_it_was(tmp_path):
    env = counting()
    agent = build_mappo(env, directory=str(tmp_path))
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 4, "disable_progressbar": True})
    trainer.train()
    own = trainer.eval(episodes=4)
    path = pathlib.Path(agent.experiment_dir) / "evaluation.json"
    assert json.loads(path.read_text()) == own and own["opponents"] == []
    trainer.eval(episodes=6, opponents=random_team(env.possible_agents))  # a random team in every seat
    assert json.loads(path.read_text()) == own  # the algorithm's own report, not the random team's
