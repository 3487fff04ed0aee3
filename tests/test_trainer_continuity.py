"""Several train() calls, and eval() between them, continue one run: env state, counters, folder."""

import os
import sys

import pytest
import torch
from helpers import build_mappo
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from toy_envs import CountingEnv

from marlparts.envs import wrap_env
from marlparts.trainers import SequentialTrainer
from marlparts.trainers.callbacks import Callback
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


def test_a_run_evaluated_on_its_training_env_before_its_first_step_still_trains_from_the_envs_own_seeds(tmp_path):
    def first_training_reset_seeds(eval_at_start):
        inner = CountingEnv(max_steps=5, leave_at=99)
        seeds = []
        reset = inner.reset
        inner.reset = lambda seed=None, options=None: seeds.append(seed) or reset(seed=seed, options=options)
        env = wrap_env(inner, seed=0)  # an instance: evaluation runs on the training env
        agent = build_mappo(env, rollouts=4, directory=str(tmp_path / str(eval_at_start)),
                            cfg={"experiment": {"tensorboard": False}})
        trainer = SequentialTrainer(env=env, agents=agent, cfg={
            "timesteps": 3, "eval_interval": 6, "eval_episodes": 1, "eval_at_start": eval_at_start,
            "disable_progressbar": True})
        seeds.clear()  # (the wrapper's probe reset)
        trainer.train()
        return seeds[-1], env.copy_seeds

    plain, own_seeds = first_training_reset_seeds(False)
    assert plain == own_seeds[0]
    after_evaluation, _ = first_training_reset_seeds(True)
    assert after_evaluation == own_seeds[0], "training went on from the evaluation's seeds"


def test_the_automatic_intervals_follow_each_train_call(tmp_path):
    env = counting()
    agent = build_mappo(env, rollouts=4, directory=str(tmp_path),
                        cfg={"experiment": {"checkpoint_interval": "auto", "write_interval": "auto", "tensorboard": False}})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 0, "disable_progressbar": True})
    trainer.train()
    trainer.cfg["timesteps"] = 200
    trainer.train()
    checkpoints = sorted(os.listdir(os.path.join(agent.experiment_dir, "checkpoints")), key=lambda n: int(n[6:-3]))
    assert checkpoints == [f"agent_{step}.pt" for step in range(20, 201, 20)]
    rows = open(os.path.join(agent.experiment_dir, "scalars.csv")).read().splitlines()[1:]
    assert sorted({int(row.split(",")[0]) for row in rows}) == list(range(2, 201, 2))


class InterruptOnUpdate(Callback):
    def on_update(self, agent, metrics):
        raise KeyboardInterrupt


def test_an_interrupt_in_an_update_callback_leaves_the_step_counted(tmp_path):
    env = counting()
    agent = build_mappo(env, rollouts=4, directory=str(tmp_path), cfg={"experiment": {"tensorboard": False}})
    callback = InterruptOnUpdate()
    trainer = SequentialTrainer(env=env, agents=agent, callbacks=[callback], cfg={"timesteps": 10,
                                                                                  "disable_progressbar": True})
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert agent.timestep == 4  # the fourth step was taken, stored and learned from
    assert agent.groups[0].memory.memory_index == 0
    trainer.callbacks.remove(callback)
    trainer.cfg["timesteps"] = 4
    updates = []
    trainer.callbacks.append(type("Count", (Callback,), {"on_update": lambda self, a, m: updates.append(a.timestep)})())
    trainer.train()
    assert agent.timestep == 8 and updates == [8]


def grad_mode_interrupts(line):
    """A trace function raising ``KeyboardInterrupt`` at the ``line``-th line of PyTorch's grad-mode switches run
    while the trainer chooses actions (as a Ctrl-C landing there would), and the count of those lines.
    """
    import torch.autograd.grad_mode as grad_mode

    seen = {"lines": 0}

    def local(frame, event, arg):
        if event == "line":
            seen["lines"] += 1
            if seen["lines"] == line:
                raise KeyboardInterrupt
        return local

    def acting(frame):
        while frame is not None:
            if frame.f_code.co_name == "_act":
                return True
            frame = frame.f_back
        return False

    def calls(frame, event, arg):
        return local if frame.f_code.co_filename == grad_mode.__file__ and acting(frame) else None

    return calls, seen


@pytest.mark.parametrize("call", ["train", "eval"])
def test_an_interrupt_while_acting_leaves_gradients_on(tmp_path, call):
    env = counting()
    agent = build_mappo(env, rollouts=4, directory=str(tmp_path), cfg={"experiment": {"tensorboard": False}})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 1, "disable_progressbar": True})
    run = trainer.train if call == "train" else (lambda: trainer.eval(episodes=1))
    tracer, seen = grad_mode_interrupts(0)
    sys.settrace(tracer)
    run()  # counts the lines
    sys.settrace(None)
    assert seen["lines"] > 3
    for line in range(1, seen["lines"] + 1):
        tracer, _ = grad_mode_interrupts(line)
        sys.settrace(tracer)
        try:
            run()
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        assert torch.is_grad_enabled(), f"gradients off after an interrupt at line {line} of acting"
    trainer.cfg["timesteps"] = 8
    trainer.train()  # updates
    assert agent.timestep >= 8
