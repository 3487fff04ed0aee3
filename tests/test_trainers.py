import pytest
import torch
from helpers import build_mappo, parameters_vector
from mpe2 import simple_spread_v3
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from marlparts.envs import wrap_env
from marlparts.trainers import EpisodeStatistics, SequentialTrainer
from marlparts.utils import AgentLayout, AgentTensors


def spread(num_envs=4):
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=10), num_envs=num_envs, seed=0)


def test_training_writes_episode_returns_and_losses_to_tensorboard(tmp_path):
    env = spread()
    agent = build_mappo(env, directory=str(tmp_path), rollouts=10,
                        cfg={"experiment": {"write_interval": 10, "experiment_name": "tb"}})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 40, "disable_progressbar": True}).train()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = events.Tags()["scalars"]
    for tag in ("Episode / return (mean over agents)", "Episode / return / agent_1", "Loss / policy", "Loss / value",
                "Policy / entropy", "Policy / KL", "Learning rate / policy[agent_0+agent_1+agent_2]",
                "Learning rate / value[agent_0+agent_1+agent_2]"):
        assert tag in tags, tag
    assert len(events.Scalars("Episode / return (mean over agents)")) >= 3


def test_two_algorithms_each_control_their_own_agents(tmp_path):
    env = spread()
    pair = build_mappo(env, directory=str(tmp_path), uids=["agent_0", "agent_1"])
    solo = build_mappo(env, directory=str(tmp_path), uids=["agent_2"], algorithm="ippo")
    before = [parameters_vector(pair.models["agent_0"]["policy"]), parameters_vector(solo.models["agent_2"]["policy"])]
    trainer = SequentialTrainer(env=env, agents=[pair, solo], cfg={"timesteps": 8, "disable_progressbar": True})
    trainer.train()
    after = [parameters_vector(pair.models["agent_0"]["policy"]), parameters_vector(solo.models["agent_2"]["policy"])]
    assert all(not torch.equal(a, b) for a, b in zip(before, after))
    result = trainer.eval(episodes=4)
    assert set(result["returns"]) == set(env.possible_agents)


def test_trainer_rejects_uncontrolled_and_unknown_agents(tmp_path):
    env = spread()
    pair = build_mappo(env, directory=str(tmp_path), uids=["agent_0", "agent_1"])
    with pytest.raises(ValueError, match=r"no algorithm controls.*agent_2"):
        SequentialTrainer(env=env, agents=pair)
    everyone = build_mappo(env, directory=str(tmp_path))
    with pytest.raises(ValueError, match=r"agent_0.*controlled by two"):
        SequentialTrainer(env=env, agents=[everyone, pair])


def test_unknown_trainer_config_key_is_named():
    with pytest.raises(KeyError, match=r"'timestep'.*'timesteps'"):
        SequentialTrainer(env=spread(), agents=[], cfg={"timestep": 10})


def test_episode_statistics_sum_rewards_until_the_copy_ends():
    layout = AgentLayout(["a", "b"], [1, 1])
    statistics = EpisodeStatistics(["a", "b"], num_envs=2, device=torch.device("cpu"))
    rewards = AgentTensors(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), layout)
    flags = AgentTensors(torch.zeros(2, 2, dtype=torch.bool), layout)
    assert statistics.step(rewards, flags, flags, {"episode_end": torch.tensor([[False], [False]])}).returns.shape == (0, 2)
    finished = statistics.step(rewards, flags, flags, {"episode_end": torch.tensor([[True], [False]])})
    assert finished.returns.tolist() == [[2.0, 4.0]] and finished.lengths.tolist() == [2]
    assert finished.copies.tolist() == [True, False]
    finished = statistics.step(rewards, flags, flags, {"episode_end": torch.tensor([[False], [True]])})
    assert finished.returns.tolist() == [[9.0, 12.0]] and finished.lengths.tolist() == [3]


def test_eval_is_greedy_and_repeatable(tmp_path):
    env = spread(num_envs=2)
    agent = build_mappo(env, directory=str(tmp_path))
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 4, "disable_progressbar": True})
    first = trainer.eval(episodes=2)
    env2 = spread(num_envs=2)
    second = SequentialTrainer(env=env2, agents=agent, cfg={"timesteps": 4}).eval(episodes=2)
    assert first == second and agent.training


def test_weights_and_biases_offline_run_gets_the_same_metrics(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    env = spread(num_envs=2)
    agent = build_mappo(env, directory=str(tmp_path), rollouts=10,
                        cfg={"experiment": {"wandb": True, "write_interval": 10, "experiment_name": "wb",
                                            "wandb_kwargs": {"mode": "offline", "project": "marlparts-test"}}})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 40, "disable_progressbar": True}).train()
    summary = dict(agent.tracker.wandb_run.summary)
    agent.close()
    assert "Loss / policy" in summary and "Episode / return (mean over agents)" in summary
    assert list((tmp_path / "wb" / "wandb").glob("offline-run-*"))


def test_a_team_algorithm_takes_the_envs_whole_space_dicts_and_keeps_its_own_agents(tmp_path):
    from helpers import Policy, Value

    from marlparts.agents import IPPO, IPPO_DEFAULT_CONFIG
    from marlparts.memories import RandomMemory

    env = spread()
    pair = build_mappo(env, directory=str(tmp_path), uids=["agent_0", "agent_1"])
    policy = Policy(observation_space=env.observation_space("agent_2"), action_space=env.action_space("agent_2"))
    value = Value(observation_space=env.observation_space("agent_2"))
    cfg = IPPO_DEFAULT_CONFIG.copy()
    cfg["rollouts"] = 4
    cfg["experiment"]["directory"] = str(tmp_path)
    solo = IPPO(possible_agents=["agent_2"], models={"agent_2": {"policy": policy, "value": value}},
                memories={"agent_2": RandomMemory(memory_size=4, num_envs=env.num_envs)},
                observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, cfg=cfg)
    assert list(solo.observation_spaces) == ["agent_2"] and list(solo.action_spaces) == ["agent_2"]
    SequentialTrainer(env=env, agents=[pair, solo], cfg={"timesteps": 8, "disable_progressbar": True}).train()
    with pytest.raises(KeyError, match=r"memories has entries for unknown agent id\(s\) \['agent_0'\]"):
        IPPO(possible_agents=["agent_2"], models={"agent_2": {"policy": policy, "value": value}},
             memories={uid: RandomMemory(memory_size=4, num_envs=env.num_envs) for uid in ("agent_0", "agent_2")},
             observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, cfg=cfg)
