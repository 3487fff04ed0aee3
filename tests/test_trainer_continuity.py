"""Several train() calls, and eval() between them, continue one run: env state, counters, folder."""

import os

import torch
from helpers import build_mappo
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from toy_envs import CountingEnv

from marlparts.envs import wrap_env
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed


def counting(num_envs=1, **kwargs):
    return wrap_env(lambda: CountingEnv(max_steps=5, leave_at=99, **kwargs), num_envs=num_envs, seed=0)


def stored_steps(agent):
    """The env step counter (first observation column) of every stored step of copy 0, agent 0."""
    return agent.groups[0].memory.get_tensor_by_name("observations")[:, 0, 0, 0].tolist()


def test_two_train_calls_continue_the_episodes_instead_of_resetting(tmp_path):
    env = counting()
    agent = build_mappo(env, rollouts=8, directory=str(tmp_path), cfg={"experiment": {"tensorboard": False}})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 3, "disable_progressbar": True})
    trainer.train()
    trainer.cfg["timesteps"] = 5
    agent.update = lambda *args: None  # keep the rollout in memory to read it
    trainer.train()
    # one episode of 5 steps (truncated at its end), then the first 3 steps of the next
    assert stored_steps(agent) == [0, 1, 2, 3, 4, 0, 1, 2]
    truncated = agent.groups[0].memory.get_tensor_by_name("truncated")[:, 0, 0, 0].tolist()
    assert truncated == [False, False, False, False, True, False, False, False]


def test_eval_between_train_calls_does_not_touch_the_training_episodes(tmp_path):
    set_seed(0)
    env = counting(num_envs=2)
    agent = build_mappo(env, rollouts=8, directory=str(tmp_path), cfg={"experiment": {"tensorboard": False}})
    agent.update = lambda *args: None
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 3, "disable_progressbar": True})
    trainer.train()
    result = trainer.eval(episodes=4)
    assert result["episodes"] == 4
    trainer.cfg["timesteps"] = 5
    trainer.train()
    assert stored_steps(agent) == [0, 1, 2, 3, 4, 0, 1, 2]
    assert not agent.groups[0].memory.get_tensor_by_name("truncated")[:4].any()


def test_a_cut_that_cannot_be_avoided_is_stored_as_truncated_and_bootstrapped(tmp_path):
    env = wrap_env(CountingEnv(max_steps=5, leave_at=99))  # an instance: no second set of copies can be made
    agent = build_mappo(env, rollouts=8, directory=str(tmp_path), cfg={"experiment": {"tensorboard": False}})
    agent.update = lambda *args: None
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 3, "disable_progressbar": True})
    trainer.train()
    trainer.eval(episodes=1)  # runs on the training env: the episode in progress is cut
    trainer.cfg["timesteps"] = 5
    trainer.train()
    memory = agent.groups[0].memory
    assert stored_steps(agent) == [0, 1, 2, 0, 1, 2, 3, 4]
    truncated = memory.get_tensor_by_name("truncated")[:, 0, :, 0]
    assert truncated[2].all() and not truncated[:2].any() and not truncated[3].any()
    # the cut step bootstraps from the observation that followed it (step 3 of the cut episode)
    cut_observation = memory.get_tensor_by_name("observations")[2].clone()
    cut_observation[..., 0] = 3.0
    cut_observation[..., 2] = memory.get_tensor_by_name("actions")[2, ..., 0].float()
    group = agent.groups[0]
    with torch.no_grad():  # CountingEnv's state is [step, agents still in the episode]
        expected, _ = agent._values(group, cut_observation, torch.tensor([[3.0, 3.0]]))
    assert torch.allclose(memory.get_tensor_by_name("final_values")[2], expected, atol=1e-6)


def test_counters_folder_and_checkpoints_continue_across_train_calls(tmp_path):
    env = counting(num_envs=2)
    agent = build_mappo(env, rollouts=4, directory=str(tmp_path),
                        cfg={"experiment": {"checkpoint_interval": 4, "write_interval": 2}})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 8, "disable_progressbar": True})
    trainer.train()
    first_folder = agent.experiment_dir
    trainer.train()
    assert agent.timestep == 16
    assert agent.experiment_dir == first_folder
    assert len(os.listdir(tmp_path)) == 1, os.listdir(tmp_path)
    checkpoints = sorted(os.listdir(os.path.join(first_folder, "checkpoints")))
    assert checkpoints == ["agent_12.pt", "agent_16.pt", "agent_4.pt", "agent_8.pt"]
    events = EventAccumulator(first_folder)
    events.Reload()
    steps = [event.step for event in events.Scalars("Loss / policy")]
    assert steps == sorted(steps) and len(set(steps)) == len(steps) and max(steps) == 16


def test_a_loaded_checkpoint_continues_its_step_count(tmp_path):
    env = counting(num_envs=2)
    agent = build_mappo(env, rollouts=4, directory=str(tmp_path / "a"), cfg={"experiment": {"checkpoint_interval": 4}})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 8, "disable_progressbar": True}).train()
    fresh = build_mappo(env, rollouts=4, directory=str(tmp_path / "b"), cfg={"experiment": {"checkpoint_interval": 0}})
    fresh.load(os.path.join(agent.experiment_dir, "checkpoints", "agent_8.pt"))
    assert fresh.timestep == 8
    SequentialTrainer(env=env, agents=fresh, cfg={"timesteps": 1, "disable_progressbar": True}).train()
    assert fresh.timestep == 9


def test_a_second_trainer_cuts_the_rollout_left_by_the_first(tmp_path):
    env = counting()
    agent = build_mappo(env, rollouts=8, directory=str(tmp_path), cfg={"experiment": {"tensorboard": False}})
    agent.update = lambda *args: None
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 3, "disable_progressbar": True}).train()
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 5, "disable_progressbar": True}).train()
    assert stored_steps(agent) == [0, 1, 2, 0, 1, 2, 3, 4]  # the new trainer resets the env ...
    truncated = agent.groups[0].memory.get_tensor_by_name("truncated")[:, 0, 0, 0].tolist()
    assert truncated == [False, False, True, False, False, False, False, True]  # ... so step 2 ends its episode


def test_a_partial_rollout_that_cannot_be_bootstrapped_is_dropped(tmp_path):
    env = counting()
    agent = build_mappo(env, rollouts=8, directory=str(tmp_path), cfg={"experiment": {"tensorboard": False}})
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 3, "disable_progressbar": True}).train()
    path = str(tmp_path / "mid_rollout.pt")
    agent.cfg["experiment"]["checkpoint_memory"] = True
    agent.save(path)
    fresh = build_mappo(env, rollouts=8, directory=str(tmp_path), cfg={"experiment": {"tensorboard": False}})
    fresh.load(path)  # three stored steps, but not the observation that followed the last one
    fresh.update = lambda *args: None
    SequentialTrainer(env=env, agents=fresh, cfg={"timesteps": 5, "disable_progressbar": True}).train()
    assert stored_steps(fresh)[:5] == [0, 1, 2, 3, 4] and fresh.groups[0].memory.memory_index == 5


def test_evaluation_on_the_training_env_uses_its_own_seeds_and_training_goes_on_with_new_episodes(tmp_path):
    from toy_envs import CoinFlipEnv

    env = wrap_env(CoinFlipEnv(), seed=3)  # an instance: evaluation must run on the training env
    agent = build_mappo(env, rollouts=4, directory=str(tmp_path), cfg={"experiment": {"tensorboard": False}})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 30, "disable_progressbar": True})
    lengths = []
    original = trainer.statistics.step

    def step(*args):
        ends = original(*args)
        lengths.extend(ends.lengths.tolist())
        return ends

    trainer.statistics.step = step
    training_seeds = list(env.copy_seeds)
    trainer.train()
    first_training = list(lengths)
    trainer.eval(episodes=5)
    assert env.copy_seeds != training_seeds, "evaluation replays the training stream"
    lengths.clear()
    trainer.train()
    assert lengths[:5] != first_training[:5], "training restarts the same episodes after an evaluation"
