"""A run cut short goes on from its last evaluation: checkpoints at every evaluation, the newest one found
under the run's folder, and a learning curve that keeps every point of the evaluation grid.
"""

import json
import os

import pytest
from helpers import build_mappo
from toy_envs import CountingEnv

from marlparts.envs import wrap_env
from marlparts.trainers import SequentialTrainer
from marlparts.utils.run_folders import checkpoint_to_resume, newest_checkpoint, step_of_checkpoint

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


def cut_short_during_its_evaluation_at_step_8(tmp_path):
    """A run of two evaluation intervals whose process died while evaluating at step 8: its checkpoint of step 8
    is there, its curve's point is not. Returns the env and the agent."""
    env = counting_env()
    agent = named_agent(env, tmp_path)
    trainer_for(agent, env, 2 * INTERVAL).train()
    curve = os.path.join(agent.experiment_dir, "evaluations.jsonl")
    with open(curve) as file:
        lines = file.readlines()
    with open(curve, "w") as file:
        file.writelines(lines[:-1])
    return env, agent


def test_a_run_cut_short_during_an_evaluation_gets_that_point_when_it_goes_on(tmp_path):
    env, agent = cut_short_during_its_evaluation_at_step_8(tmp_path)
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


def test_a_new_trainer_that_goes_on_after_an_evaluation_does_not_repeat_it(tmp_path):
    env = counting_env()
    agent = named_agent(env, tmp_path)
    trainer_for(agent, env, 2 * INTERVAL).train()
    trainer_for(agent, env, 2 * INTERVAL).train()  # a second phase, with a trainer of its own
    assert curve_steps(agent) == [0, 4, 8, 12, 16]


def test_a_run_cut_short_during_its_last_evaluation_gets_that_point_with_no_step_left(tmp_path):
    env, _ = cut_short_during_its_evaluation_at_step_8(tmp_path)
    resumed = named_agent(counting_env(), tmp_path)
    resumed.load(newest_checkpoint(str(tmp_path)))
    trainer_for(resumed, env, 0).train()  # the budget is spent: only the missing evaluation is left
    assert curve_steps(resumed) == [0, 4, 8]


def test_a_checkpoint_without_the_evaluation_step_or_the_zero_sum_mark_loads(tmp_path):
    env = counting_env()
    agent = named_agent(env, tmp_path)
    trainer_for(agent, env, INTERVAL).train()
    state = agent.state_dict()
    del state["counters"]["evaluated_at"]  # as written before the step was kept
    del state["counters"]["zero_sum_self_play"]  # as written before self-play of zero-sum games was marked
    resumed = named_agent(counting_env(), tmp_path)
    resumed.load_state_dict(state)
    assert resumed.timestep == INTERVAL and resumed.evaluated_at is None and not resumed.zero_sum_self_play


def test_a_run_folder_moved_elsewhere_goes_on_where_it_now_is(tmp_path):
    env = counting_env()
    agent = named_agent(env, tmp_path / "first")
    trainer_for(agent, env, INTERVAL).train()
    os.rename(tmp_path / "first", tmp_path / "moved")
    resumed = named_agent(counting_env(), tmp_path / "moved")
    resumed.load(newest_checkpoint(str(tmp_path / "moved")))
    trainer_for(resumed, env, INTERVAL).train()
    assert os.path.samefile(resumed.experiment_dir, tmp_path / "moved" / "run")
    # the checkpoint was written just before the evaluation at 4, which the resumed run repeats
    assert curve_steps(resumed) == [0, 4, 4, 8] and not (tmp_path / "first").exists()


def make_checkpoints(root, files):
    """``files``: ``{relative path: modification time}``; the files are empty."""
    for relative, written in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        os.utime(path, (written, written))


def test_newest_checkpoint_follows_the_lineage_that_ran_last_and_none_where_there_is_none(tmp_path):
    assert newest_checkpoint(str(tmp_path)) is None
    make_checkpoints(tmp_path, {"run/checkpoints/agent_40.pt": 100, "run/checkpoints/agent_90.pt": 200,
                                "run/checkpoints/final_agent.pt": 900, "run/checkpoints/best_agent.pt": 900,
                                "run/checkpoints/.agent_500.pt.1a2b.tmp": 900,
                                "run_from_40/checkpoints/agent_60.pt": 300,  # resumed at 40 later: it ran last
                                "same_time/a/checkpoints/agent_7.pt": 50, "same_time/b/checkpoints/agent_9.pt": 50})
    assert newest_checkpoint(str(tmp_path)) == str(tmp_path / "run_from_40" / "checkpoints" / "agent_60.pt")
    assert newest_checkpoint(str(tmp_path / "same_time")) == str(tmp_path / "same_time" / "b" / "checkpoints" /
                                                                  "agent_9.pt")


def test_the_step_of_a_checkpoint_is_read_off_its_name_and_other_files_have_none():
    assert step_of_checkpoint("agent_40.pt") == 40
    assert step_of_checkpoint(os.path.join("run", "checkpoints", "agent_7.pt")) == 7
    assert [step_of_checkpoint(name) for name in ("best_agent.pt", "final_agent.pt", ".agent_500.pt.1a2b.tmp",
                                                  "agent_x.pt", "agent_40.pt.tmp")] == [None] * 5


def test_a_run_goes_on_only_from_its_own_settings(tmp_path):
    settings = {"env": "a", "seed": 0, "timesteps": 100}
    assert checkpoint_to_resume(str(tmp_path), settings) is None  # a fresh start records its settings
    make_checkpoints(tmp_path, {"run/checkpoints/agent_5.pt": 100})
    assert checkpoint_to_resume(str(tmp_path), dict(settings)) == str(tmp_path / "run" / "checkpoints" / "agent_5.pt")
    with pytest.raises(ValueError, match=r"holds a run of other settings \(seed 0 there, 1 here\)"):
        checkpoint_to_resume(str(tmp_path), {**settings, "seed": 1})
    nothing_left = tmp_path / "nothing_left"
    assert checkpoint_to_resume(str(nothing_left), settings) is None
    assert checkpoint_to_resume(str(nothing_left), {**settings, "seed": 1}) is None  # no checkpoint: replaced
    with open(nothing_left / "run_settings.json") as file:
        assert json.load(file)["seed"] == 1
    unrecorded = tmp_path / "unrecorded"
    make_checkpoints(unrecorded, {"run/checkpoints/agent_5.pt": 100})
    with pytest.raises(ValueError, match="checkpoints .* of a run whose settings were not recorded"):
        checkpoint_to_resume(str(unrecorded), settings)


def test_a_checkpoint_saved_outside_its_run_folder_keeps_the_run_s_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a project whose root holds checkpoints/ of its own
    env = counting_env()
    agent = build_mappo(env, rollouts=4, directory="runs")
    trainer_for(agent, env, INTERVAL).train()
    os.makedirs("checkpoints")
    agent.save(os.path.join("checkpoints", "model.pt"))
    resumed = build_mappo(counting_env(), rollouts=4, directory="runs")
    resumed.load(os.path.join("checkpoints", "model.pt"))
    trainer_for(resumed, env, INTERVAL).train()
    assert os.path.samefile(resumed.experiment_dir, agent.experiment_dir)
    assert not os.path.exists("evaluations.jsonl")


def test_a_checkpoint_loaded_into_a_folder_of_its_own_evaluates_its_first_step(tmp_path):
    env = counting_env()
    agent = named_agent(env, tmp_path)
    trainer_for(agent, env, 2 * INTERVAL).train()
    agent.save(str(tmp_path / "final.pt"))  # evaluated at its last step
    tuned = build_mappo(counting_env(), rollouts=4, directory=str(tmp_path),
                        cfg={"experiment": {"experiment_name": "fine_tune"}})
    tuned.load(str(tmp_path / "final.pt"))
    trainer_for(tuned, env, INTERVAL).train()
    assert tuned.experiment_dir.endswith("fine_tune") and curve_steps(tuned) == [8, 12]


def test_within_a_run_folder_the_step_decides_whatever_the_files_times(tmp_path):
    make_checkpoints(tmp_path, {"run/checkpoints/agent_12.pt": 100, "run/checkpoints/agent_8.pt": 200})  # a copy
    assert newest_checkpoint(str(tmp_path)) == str(tmp_path / "run" / "checkpoints" / "agent_12.pt")


def test_teams_at_different_steps_are_evaluated_once_per_step_each_on_its_own_step_count(tmp_path):
    """A team that goes on from a checkpoint beside a new one: one evaluation per step serves both, and each
    team's learning curve, and its schedules (entropy annealing), count its own steps."""
    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=99), num_envs=2, seed=0)
    pair = build_mappo(env, rollouts=4, directory=str(tmp_path), uids=["agent_0", "agent_1"],
                       cfg={"experiment": {"experiment_name": "pair"}})
    pair.timestep = 8  # a team that goes on from a checkpoint of step 8 beside a new one
    solo = build_mappo(env, rollouts=4, directory=str(tmp_path), uids=["agent_2"], algorithm="ippo",
                       cfg={"experiment": {"experiment_name": "solo"}, "final_entropy_loss_scale": 0.0,
                            "entropy_annealing_timesteps": 16})
    trainer = SequentialTrainer(env=env, agents=[pair, solo], cfg={
        "timesteps": INTERVAL, "eval_interval": INTERVAL, "eval_at_start": True, "eval_episodes": 2,
        "disable_progressbar": True})
    trainer.train()
    assert solo.timestep == 4 and solo.annealing_progress == pytest.approx(4 / 16)  # its update at its own step 3
    for _ in range(2):
        trainer.train()
    for agent, steps in ((pair, [8, 12, 16, 20]), (solo, [0, 4, 8, 12])):
        with open(os.path.join(agent.experiment_dir, "evaluations.jsonl")) as file:
            points = [json.loads(line) for line in file]
        assert [point["timestep"] for point in points] == steps
        assert [point["env_steps"] for point in points] == [2 * step for step in steps]  # 2 copies
        with open(os.path.join(agent.experiment_dir, "evaluation.json")) as file:
            assert json.load(file)["timestep"] == steps[-1]


def test_a_resumed_run_trains_on_episodes_it_has_not_seen_and_a_fresh_run_starts_on_the_env_s_own_seeds(tmp_path):
    """The training copies of a run that goes on from a checkpoint are reset with seeds of the step it goes on from,
    not the env's own seeds again: those would replay the episodes the run began with at every resume."""
    from mpe2 import simple_spread_v3

    def spread():
        return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=10), num_envs=2, seed=0)

    first_observations = []

    def train(agent, env, steps):
        reset = env.reset

        def spied_reset(seed=None):
            observations, infos = reset(seed=seed)
            first_observations.append(observations["agent_0"].clone())
            return observations, infos
        env.reset = spied_reset
        SequentialTrainer(env=env, agents=agent, cfg={"timesteps": steps, "disable_progressbar": True}).train()

    env = spread()
    agent = named_agent(env, tmp_path)
    train(agent, env, 20)
    path = os.path.join(str(tmp_path), "at_20.pt")
    agent.save(path)
    resumed_env = spread()
    resumed = named_agent(resumed_env, tmp_path)
    resumed.load(path)
    train(resumed, resumed_env, 20)
    fresh, _ = spread().reset()
    assert first_observations[0].equal(fresh["agent_0"])  # a fresh run: the env's own seeds, as before
    assert not first_observations[1].equal(first_observations[0])


def test_a_fresh_run_reseeds_its_training_copies_after_an_evaluation_on_them_by_its_reset_count():
    """A run from step 0 that evaluates on its training copies resets them with the env's own seeds first, then
    with seeds drawn by the count of resets (the seeds its episodes have always had)."""
    from marlparts.trainers.sequential import TRAINING_STREAM
    from marlparts.utils.seeding import derived_seed

    env = wrap_env(CountingEnv(max_steps=5, leave_at=99), seed=3)  # one instance: no separate evaluation copies
    agent = build_mappo(env, rollouts=4)
    seeds = []
    reset = env.reset

    def spied_reset(seed=None, **kwargs):
        seeds.append(seed)
        return reset(seed=seed, **kwargs)
    env.reset = spied_reset
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 8, "eval_interval": 4, "eval_episodes": 1,
                                                           "disable_progressbar": True})
    trainer.train()
    training = [seed for seed in seeds if seed is None or seed in {derived_seed(3, TRAINING_STREAM, n) for n in (1, 2)}]
    assert training == [None, derived_seed(3, TRAINING_STREAM, 1)]


def test_teams_whose_steps_differ_off_the_evaluation_grid_are_refused_naming_their_steps(tmp_path):
    env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=99), num_envs=2, seed=0)
    pair = build_mappo(env, rollouts=4, directory=str(tmp_path), uids=["agent_0", "agent_1"],
                       cfg={"experiment": {"experiment_name": "pair"}})
    pair.timestep = 6  # 6 steps ahead of the new team: its evaluations at 8, 12 would be the new one's 2, 6
    solo = build_mappo(env, rollouts=4, directory=str(tmp_path), uids=["agent_2"], algorithm="ippo",
                       cfg={"experiment": {"experiment_name": "solo"}})
    trainer = SequentialTrainer(env=env, agents=[pair, solo], cfg={
        "timesteps": INTERVAL, "eval_interval": INTERVAL, "eval_at_start": True, "eval_episodes": 2,
        "disable_progressbar": True})
    with pytest.raises(ValueError, match=r"at step 6, .* at step 0\) differ by other than a multiple of "
                                         r"cfg\['eval_interval'\] \(4\)"):
        trainer.train()
    assert pair.timestep == 6 and solo.timestep == 0
