"""What trainer.eval() reports, whoever plays the seats."""

import json
import pathlib

import gymnasium
import pytest
import torch
from helpers import build_mappo
from toy_envs import CountingEnv

from marlparts.envs import wrap_env
from marlparts.trainers import SequentialTrainer
from marlparts.trainers.opponents import RandomPolicy, random_team


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


def zeros(observations, mask):
    """A fixed policy: action 0 for every copy."""
    return torch.zeros(observations.shape[0], 1, dtype=torch.long)


def test_an_evaluation_against_other_seats_than_training_adds_no_point_to_the_learning_curve(tmp_path):
    env = counting()
    agent = build_mappo(env, directory=str(tmp_path), rollouts=4)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 8, "eval_interval": 4, "eval_episodes": 2,
                                                           "disable_progressbar": True})
    trainer.train()
    curve = pathlib.Path(agent.experiment_dir) / "evaluations.jsonl"
    points = curve.read_text()
    report = trainer.eval(episodes=2, opponents={"agent_2": zeros})  # the team against a fixed seat
    assert report["opponents"] == ["agent_2"]
    assert curve.read_text() == points  # the curve is of the seats the algorithm trains against
    trainer.eval(episodes=2)
    assert len(curve.read_text().splitlines()) == len(points.splitlines()) + 1


def test_an_evaluation_video_is_written_only_for_algorithms_that_played_and_never_over_their_own(tmp_path):
    env = wrap_env(lambda: CountingEnv(max_steps=4, leave_at=99, render_mode="rgb_array"), num_envs=2, seed=0)
    agent = build_mappo(env, directory=str(tmp_path), rollouts=4, cfg={"experiment": {"tensorboard": False}})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 4, "disable_progressbar": True,
                                                           "eval_actions": "greedy", "video_format": "gif"})
    trainer.train()
    videos = pathlib.Path(agent.experiment_dir) / "videos"
    own = trainer.eval(episodes=2, video=True)["videos"]
    contents = {path.name: path.read_bytes() for path in videos.iterdir()}
    nobody = trainer.eval(episodes=2, video=True, opponents={uid: zeros for uid in env.possible_agents})
    assert nobody.get("videos", []) == []
    against_fixed = trainer.eval(episodes=2, video=True, opponents={"agent_2": zeros})["videos"]
    assert against_fixed and set(against_fixed).isdisjoint(own)
    assert {path.name: path.read_bytes() for path in videos.iterdir() if path.name in contents} == contents


def test_a_run_loaded_into_a_folder_of_its_own_keeps_its_best_agent_there(tmp_path):
    def run(name, checkpoint=None):
        env = counting()
        agent = build_mappo(env, directory=str(tmp_path), rollouts=4,
                            cfg={"learning_rate": 1e-12, "experiment": {"experiment_name": name}})  # returns stay put
        if checkpoint is not None:
            agent.load(checkpoint)
        SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 8, "eval_interval": 4, "eval_episodes": 2,
                                                      "eval_at_start": True, "disable_progressbar": True}).train()
        return agent

    first = run("first")
    checkpoint = tmp_path / "first" / "final.pt"
    first.save(str(checkpoint))
    run("second", checkpoint)  # as good as the first run's best, never better: still the best of its own curve
    assert (tmp_path / "first" / "checkpoints" / "best_agent.pt").exists()
    assert (tmp_path / "second" / "checkpoints" / "best_agent.pt").exists()


def test_a_random_policy_opponent_of_training_is_played_by_a_generator_of_its_own_in_evaluations(tmp_path):
    def run(evaluate):
        torch.manual_seed(0)
        env = counting()
        agent = build_mappo(env, directory=str(tmp_path / str(evaluate)), uids=["agent_0", "agent_1"], rollouts=4)
        opponent = RandomPolicy(gymnasium.spaces.Discrete(4), seed=123)
        trainer = SequentialTrainer(env=env, agents=agent, opponents={"agent_2": opponent},
                                    cfg={"timesteps": 8, "disable_progressbar": True, "eval_actions": "greedy"})
        trainer.train()
        evaluations = [trainer.eval(episodes=4)["returns"]["agent_2"] for _ in range(2)] if evaluate else []
        moves, step = [], trainer.statistics.step
        trainer.statistics.step = lambda rewards, *args: moves.append(rewards["agent_2"].tolist()) or step(rewards, *args)
        trainer.train()
        return moves, evaluations

    moves, _ = run(False)
    moves_after_evaluations, evaluations = run(True)
    assert evaluations[0] == evaluations[1]  # an evaluation repeats itself
    assert moves_after_evaluations == moves  # and leaves the training opponent's stream as it was


def trained_against_a_random_seat(tmp_path, opponent="random"):
    """A trainer of MAPPO on agent_0 and agent_1 against ``opponent`` in agent_2's seat, after 4 steps."""
    env = counting()
    agent = build_mappo(env, directory=str(tmp_path), uids=["agent_0", "agent_1"], rollouts=4)
    trainer = SequentialTrainer(env=env, agents=agent, opponents={"agent_2": opponent},
                                cfg={"timesteps": 4, "disable_progressbar": True})
    trainer.train()
    return agent, trainer


def test_an_evaluation_naming_the_trainers_own_opponents_is_a_point_of_the_learning_curve(tmp_path):
    agent, trainer = trained_against_a_random_seat(tmp_path)
    curve = pathlib.Path(agent.experiment_dir) / "evaluations.jsonl"
    trainer.eval(episodes=2, opponents={"agent_2": "random"})  # the seats it trains against, named again
    assert len(curve.read_text().splitlines()) == 1


def test_a_subclass_of_random_policy_plays_as_itself_in_evaluations(tmp_path):
    class AlwaysThree(RandomPolicy):
        def __call__(self, observation, action_mask=None):
            return torch.full((observation.shape[0], 1), 3, dtype=torch.long)

    _, trainer = trained_against_a_random_seat(tmp_path, AlwaysThree(gymnasium.spaces.Discrete(4), seed=0))
    report = trainer.eval(episodes=2)
    assert report["returns"]["agent_2"] == pytest.approx(3.0 * 4)  # CountingEnv: the reward is the action


def test_which_evaluations_are_points_of_the_curve_does_not_ask_the_policies_to_compare_themselves(tmp_path):
    class Scripted:
        """A policy object whose == compares tensors (it would raise where asked for one truth value)."""

        def __init__(self):
            self.table = torch.tensor([0, 1, 2, 3])

        def __eq__(self, other):
            return self.table == other.table

        __hash__ = object.__hash__

        def __call__(self, observation, action_mask=None):
            return torch.zeros(observation.shape[0], 1, dtype=torch.long)

    agent, trainer = trained_against_a_random_seat(tmp_path, Scripted())
    trainer.eval(episodes=2, opponents={"agent_2": Scripted()})  # another object: other seats
    curve = pathlib.Path(agent.experiment_dir) / "evaluations.jsonl"
    assert not curve.exists()


def test_random_seats_named_either_way_are_the_seats_the_algorithm_trains_against(tmp_path):
    agent, trainer = trained_against_a_random_seat(tmp_path, RandomPolicy(gymnasium.spaces.Discrete(4), seed=5))
    own = trainer.eval(episodes=2)
    named = trainer.eval(episodes=2, opponents={"agent_2": "random"})  # plays alike in an evaluation
    assert named["returns"] == own["returns"]
    curve = pathlib.Path(agent.experiment_dir) / "evaluations.jsonl"
    assert len(curve.read_text().splitlines()) == 2


def test_a_random_player_over_fewer_actions_than_the_seat_has_is_another_player(tmp_path):
    agent, trainer = trained_against_a_random_seat(tmp_path)
    report = trainer.eval(episodes=2, opponents={"agent_2": RandomPolicy(gymnasium.spaces.Discrete(1))})
    assert report["returns"]["agent_2"] == 0.0  # always action 0
    assert not (pathlib.Path(agent.experiment_dir) / "evaluations.jsonl").exists()
