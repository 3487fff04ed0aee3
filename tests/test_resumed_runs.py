"""A run cut short goes on from its last evaluation: checkpoints at every evaluation, the newest one found
under the run's folder, and a learning curve that keeps every point of the evaluation grid.
"""

import json
import os

from helpers import build_mappo
from toy_envs import CountingEnv

from marlparts.envs import wrap_env
from marlparts.trainers import SequentialTrainer
from marlparts.utils.run_folders import newest_checkpoint

INTERVAL = 4  # vectorized steps between evaluations


def counting_env():
    return wrap_env(lambda: CountingEnv(max_steps=5, leave_at=99), num_envs=2, seed=0)


def trainer_for(agent, env, timesteps):
    return SequentialTrainer(env=env, agents=agent, cfg={
        "timesteps": timesteps, "eval_interval": INTERVAL, "eval_at_start": True, "checkpoint_at_eval": True,
        "eval_episodes": 2, "disable_progressbar": True})


def curve_steps(agent):
    with open(os.path.join(agent.experiment_dir, "evaluations.jsonl")) as file:
        return [json.loads(line)["env_steps"] // 2 for line in file if line.strip()]


def named_agent(env, tmp_path):
    return build_mappo(env, rollouts=4, directory=str(tmp_path), cfg={"experiment": {"experiment_name": "run"}})


def test_checkpoints_are_written_at_every_evaluation_and_the_newest_is_found(tmp_path):
    env = counting_env()
    agent = named_agent(env, tmp_path)
    trainer_for(agent, env, 3 * INTERVAL).train()
    written = {name for name in os.listdir(os.path.join(agent.experiment_dir, "checkpoints")) if name != "best_agent.pt"}
    assert written == {f"agent_{step}.pt" for step in (4, 8, 12)}  # none of the untrained start
    assert curve_steps(agent) == [0, 4, 8, 12]
    assert newest_checkpoint(str(tmp_path)) == os.path.join(agent.experiment_dir, "checkpoints", "agent_12.pt")


def test_a_run_cut_short_during_an_evaluation_gets_that_point_when_it_goes_on(tmp_path):
    env = counting_env()
    agent = named_agent(env, tmp_path)
    trainer_for(agent, env, 2 * INTERVAL).train()
    curve = os.path.join(agent.experiment_dir, "evaluations.jsonl")
    with open(curve) as file:
        lines = file.readlines()
    with open(curve, "w") as file:  # cut short while evaluating at step 8: its checkpoint is there, its point is not
        file.writelines(lines[:-1])
    resumed = named_agent(counting_env(), tmp_path)
    resumed.load(newest_checkpoint(str(tmp_path)))
    assert resumed.timestep == 2 * INTERVAL
    trainer_for(resumed, env, 2 * INTERVAL).train()
    assert resumed.experiment_dir == agent.experiment_dir
    assert curve_steps(resumed) == [0, 4, 8, 12, 16]


def test_a_second_train_call_of_one_trainer_does_not_evaluate_its_first_step_again(tmp_path):
    env = counting_env()
    agent = named_agent(env, tmp_path)
    trainer = trainer_for(agent, env, INTERVAL)
    trainer.train()
    trainer.train()
    assert curve_steps(agent) == [0, 4, 8]


def test_a_run_resumed_off_the_evaluation_grid_evaluates_only_on_it(tmp_path):
    env = counting_env()
    agent = named_agent(env, tmp_path)
    trainer_for(agent, env, INTERVAL + 2).train()
    agent.save(os.path.join(str(tmp_path), "at_6.pt"))
    resumed = named_agent(counting_env(), tmp_path)
    resumed.load(os.path.join(str(tmp_path), "at_6.pt"))
    trainer_for(resumed, env, 2).train()
    assert curve_steps(resumed) == [0, 4, 8]


def test_newest_checkpoint_takes_the_latest_step_of_any_folder_and_none_where_there_is_none(tmp_path):
    assert newest_checkpoint(str(tmp_path)) is None
    for folder, names in {"a/checkpoints": ["agent_90.pt", "final_agent.pt", ".agent_500.pt.1a2b.tmp"],
                          "a_from_20/checkpoints": ["agent_120.pt", "agent_30.pt"],
                          "b/checkpoints": ["best_agent.pt", "agent_7.pt"]}.items():
        os.makedirs(tmp_path / folder)
        for name in names:
            (tmp_path / folder / name).write_bytes(b"")
    assert newest_checkpoint(str(tmp_path)) == str(tmp_path / "a_from_20" / "checkpoints" / "agent_120.pt")
    assert newest_checkpoint(str(tmp_path / "b")) == str(tmp_path / "b" / "checkpoints" / "agent_7.pt")
