"""Evaluation: its own seeded env copies, no bias toward short episodes, periodic runs, reports, teams."""

import json
import os

import pytest
import torch
from helpers import build_mappo
from mpe2 import simple_spread_v3
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from toy_envs import CoinFlipEnv, CountingEnv

from marlparts.envs import wrap_env
from marlparts.trainers import SequentialTrainer


def test_eval_is_not_biased_toward_short_episodes(tmp_path):
    # half the episodes last one step with return 0, half ten steps with return 10: the mean is 5
    env = wrap_env(lambda: CoinFlipEnv(), num_envs=10, seed=0)
    agent = build_mappo(env, directory=str(tmp_path))
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"eval_num_envs": 10, "disable_progressbar": True})
    result = trainer.eval(episodes=1000)
    assert result["episodes"] == 1000
    assert result["mean_return"] == pytest.approx(5.0, abs=0.5)  # the standard error is 0.16


def test_eval_uses_fixed_seeds_apart_from_the_training_copies(tmp_path):
    env = wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=10), num_envs=4, seed=0)
    agent = build_mappo(env, directory=str(tmp_path))
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 3, "disable_progressbar": True})
    trainer.train()
    first = trainer.eval(episodes=8)
    again = trainer.eval(episodes=8)
    assert trainer.eval_env is not env
    assert not set(trainer.eval_env.copy_seeds) & set(env.copy_seeds)
    assert first["episodes"] == again["episodes"] == 8 and first == again


def test_periodic_evaluation_is_logged_chooses_the_best_checkpoint_and_writes_a_report(tmp_path):
    env = wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=10), num_envs=2, seed=0)
    agent = build_mappo(env, rollouts=4, directory=str(tmp_path),
                        cfg={"experiment": {"experiment_name": "run", "write_interval": 4}})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 12, "eval_interval": 4, "eval_episodes": 4,
                                                            "disable_progressbar": True})
    evaluated = []
    original = trainer.eval
    trainer.eval = lambda *args, **kwargs: evaluated.append(original(*args, **kwargs)) or evaluated[-1]
    trainer.train()
    assert len(evaluated) == 3
    folder = tmp_path / "run"
    events = EventAccumulator(str(folder))
    events.Reload()
    logged = [event.value for event in events.Scalars("Evaluation / return (team)")]
    assert logged == pytest.approx([result["mean_return"] for result in evaluated])
    assert "Evaluation / return / agent_2" in events.Tags()["scalars"]
    best = torch.load(folder / "checkpoints" / "best_agent.pt", weights_only=True)
    assert best["counters"]["best_return"] == pytest.approx(max(result["mean_return"] for result in evaluated))
    report = json.loads((folder / "evaluation.json").read_text())
    assert report["episodes"] == 4 and report["timestep"] == 12
    assert report["mean_return"] == pytest.approx(evaluated[-1]["mean_return"])
    assert set(report["returns"]) == set(env.possible_agents) and "std_return" in report


def test_returns_are_reported_per_team_never_averaged_across_teams(tmp_path):
    env = wrap_env(lambda: CountingEnv(max_steps=3, leave_at=99), num_envs=2, seed=0)
    pair = build_mappo(env, directory=str(tmp_path / "pair"), uids=["agent_0", "agent_1"])
    solo = build_mappo(env, directory=str(tmp_path / "solo"), uids=["agent_2"], algorithm="ippo")
    trainer = SequentialTrainer(env=env, agents=[pair, solo], cfg={"timesteps": 6, "disable_progressbar": True})
    trainer.train()
    result = trainer.eval(episodes=4)
    assert "mean_return" not in result
    assert set(result["teams"]) == {"MAPPO", "IPPO"}
    for team, uids in (("MAPPO", ["agent_0", "agent_1"]), ("IPPO", ["agent_2"])):
        team_result = result["teams"][team]
        assert set(team_result["returns"]) == set(uids)
        expected = sum(result["returns"][uid] for uid in uids) / len(uids)
        assert team_result["mean_return"] == pytest.approx(expected)
    reports = [json.loads(open(os.path.join(a.experiment_dir, "evaluation.json")).read()) for a in (pair, solo)]
    assert all(set(report["teams"]) == {"MAPPO", "IPPO"} for report in reports)


def test_one_eval_reports_greedy_and_sampled_returns_side_by_side_from_the_same_episodes(tmp_path):
    env = wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=10), num_envs=4, seed=0)
    agent = build_mappo(env, directory=str(tmp_path))
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 3, "disable_progressbar": True})
    trainer.train()
    both = trainer.eval(episodes=8)
    assert both["actions"] == "greedy" and set(both) >= {"greedy", "sampled"}
    greedy, sampled = both["greedy"], both["sampled"]
    assert both["mean_return"] == greedy["mean_return"]
    assert len(greedy["teams"]["MAPPO"]["episode_returns"]) == len(sampled["teams"]["MAPPO"]["episode_returns"]) == 8
    assert greedy["mean_return"] != sampled["mean_return"]  # a near-uniform policy: its samples are not its argmax
    # each pass alone gives the same figures: the same starting states, and the sampled actions from their own seed
    for actions, expected in (("greedy", greedy), ("sampled", sampled)):
        alone = SequentialTrainer(env=env, agents=agent, cfg={"eval_actions": actions, "disable_progressbar": True})
        report = alone.eval(episodes=8)
        assert report["actions"] == actions and "greedy" not in report
        assert report["teams"]["MAPPO"]["episode_returns"] == expected["teams"]["MAPPO"]["episode_returns"]


def test_fixed_policies_in_every_seat_are_evaluated_once_not_once_per_action_choice(tmp_path):
    from marlparts.trainers.opponents import random_team

    env = wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=10), num_envs=4, seed=0)
    trainer = SequentialTrainer(env=env, agents=build_mappo(env, directory=str(tmp_path)),
                                cfg={"disable_progressbar": True})  # eval_actions "both" by default
    passes = []
    original = trainer._evaluation_pass
    trainer._evaluation_pass = lambda *args, **kwargs: passes.append(kwargs["sampled"]) or original(*args, **kwargs)
    report = trainer.eval(episodes=4, opponents=random_team(env.possible_agents))
    assert passes == [False] and "sampled" not in report and len(report["teams"]) == 0
    assert sorted(report["opponents"]) == sorted(env.possible_agents)
    trainer.eval(episodes=4)  # an algorithm in a seat: both passes
    assert passes == [False, False, True]


def test_an_evaluation_leaves_the_training_random_stream_as_it_was(tmp_path):
    def trained_parameters(evaluate):
        env = wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=10), num_envs=2, seed=0)
        torch.manual_seed(0)
        agent = build_mappo(env, directory=str(tmp_path / str(evaluate)))
        trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 6, "disable_progressbar": True})
        trainer.train()
        if evaluate:
            trainer.eval(episodes=4)
        trainer.train()
        return torch.cat([parameter.detach().flatten() for parameter in agent.groups[0].models["policy"].parameters()])

    assert torch.equal(trained_parameters(evaluate=True), trained_parameters(evaluate=False))


def test_team_returns_can_be_summed_over_the_agents(tmp_path):
    env = wrap_env(lambda: CountingEnv(max_steps=3, leave_at=99), num_envs=2, seed=0)
    agent = build_mappo(env, directory=str(tmp_path))
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"team_return": "sum", "eval_actions": "greedy",
                                                            "disable_progressbar": True})
    result = trainer.eval(episodes=4)
    assert result["mean_return"] == pytest.approx(sum(result["returns"].values()))
    episodes = result["teams"]["MAPPO"]["episode_returns"]
    assert sum(episodes) / len(episodes) == pytest.approx(result["mean_return"])


def test_evaluations_from_the_start_are_appended_as_a_learning_curve(tmp_path):
    env = wrap_env(lambda: CountingEnv(max_steps=3, leave_at=99), num_envs=2, seed=0)
    agent = build_mappo(env, rollouts=4, directory=str(tmp_path), cfg={"experiment": {"experiment_name": "run"}})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 8, "eval_interval": 4, "eval_at_start": True,
                                                            "eval_episodes": 3, "disable_progressbar": True})
    trainer.train()
    trainer.train()  # a second call goes on: no second evaluation at its start
    lines = (tmp_path / "run" / "evaluations.jsonl").read_text().splitlines()
    points = [json.loads(line) for line in lines]
    assert [point["timestep"] for point in points] == [0, 4, 8, 12, 16]
    assert [point["env_steps"] for point in points] == [0, 8, 16, 24, 32]
    for point in points:
        assert point["episodes"] == 3
        for actions in ("greedy", "sampled"):
            assert len(point[actions]["episode_returns"]) == 3
            assert point[actions]["mean_return"] == pytest.approx(sum(point[actions]["episode_returns"]) / 3)


@pytest.mark.parametrize("key, value", [("eval_actions", "stochastic"), ("team_return", "max")])
def test_an_unknown_evaluation_choice_is_refused_naming_the_key(key, value, tmp_path):
    env = wrap_env(lambda: CountingEnv(), num_envs=1, seed=0)
    agent = build_mappo(env, directory=str(tmp_path))
    with pytest.raises(ValueError, match=f"trainer cfg\\['{key}'\\] must be one of"):
        SequentialTrainer(env=env, agents=agent, cfg={key: value})
