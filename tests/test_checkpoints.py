"""Checkpoints: a failed load changes nothing, a resumed run ends where an uninterrupted one does,
and a process killed while writing leaves the previous checkpoint loadable.
"""

import pathlib
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import build_mappo, parameters_vector
from mpe2 import simple_spread_v3
from toy_envs import CountingEnv

from marlparts.envs import wrap_env

HERE = pathlib.Path(__file__).resolve().parent


def spread(num_envs=2):
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=10), num_envs=num_envs, seed=0)


def test_loading_a_checkpoint_of_other_shapes_names_the_tensor_and_changes_nothing(tmp_path):
    other = build_mappo(wrap_env(lambda: CountingEnv(), num_envs=2), directory=str(tmp_path))  # same agent ids
    path = str(tmp_path / "other.pt")
    other.save(path)
    agent = build_mappo(spread(), directory=str(tmp_path))
    agent.timestep = 5
    before = [parameters_vector(model) for model in agent.distinct_models()]
    with pytest.raises(ValueError, match=r"policy\[agent_0\+agent_1\+agent_2\].*net\.0\.weight.*\(16, 3\).*\(16, 18\)"):
        agent.load(path)
    assert agent.timestep == 5
    assert all(torch.equal(a, parameters_vector(m)) for a, m in zip(before, agent.distinct_models()))


def test_a_load_that_fails_on_a_later_part_leaves_the_earlier_parts_untouched(tmp_path):
    env = spread()
    one_value_per_agent = build_mappo(env, directory=str(tmp_path))
    path = str(tmp_path / "a.pt")
    one_value_per_agent.save(path)
    agent = build_mappo(env, directory=str(tmp_path), cfg={"agent_specific_values": "none"})
    policy_before = parameters_vector(agent.groups[0].models["policy"])
    with pytest.raises(ValueError, match=r"value\[agent_0\+agent_1\+agent_2\].*net\.2\.(weight|bias)"):
        agent.load(path)
    assert torch.equal(policy_before, parameters_vector(agent.groups[0].models["policy"]))


@pytest.mark.parametrize("algorithm", ["mappo", "maddpg"])
def test_a_run_resumed_in_a_fresh_process_ends_like_an_uninterrupted_one(tmp_path, algorithm):
    def run(*args):
        done = subprocess.run([sys.executable, str(HERE / "resume_run.py"), algorithm, *map(str, args)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]

    run(20, tmp_path / "straight.pt")
    run(10, tmp_path / "first_half.pt", "--save", tmp_path / "checkpoint.pt")
    run(10, tmp_path / "resumed.pt", "--load", tmp_path / "checkpoint.pt")
    straight = torch.load(tmp_path / "straight.pt", weights_only=True)
    resumed = torch.load(tmp_path / "resumed.pt", weights_only=True)
    halfway = torch.load(tmp_path / "first_half.pt", weights_only=True)
    assert resumed["timestep"] == straight["timestep"] == 20
    assert any(not torch.equal(a, b) for a, b in zip(halfway["parameters"], straight["parameters"]))
    for a, b in zip(straight["parameters"], resumed["parameters"]):
        assert torch.allclose(a, b, atol=1e-6), (a - b).abs().max()


WRITER = """
import sys, torch
sys.path.insert(0, {here!r})
from helpers import build_mappo
from marlparts.envs import wrap_env
from toy_envs import CountingEnv
agent = build_mappo(wrap_env(lambda: CountingEnv(), num_envs=1), directory={directory!r})
agent.save({path!r})
print("saved", flush=True)
while True:
    for model in agent.distinct_models():
        for p in model.parameters():
            p.data.add_(1.0)
    agent.save({path!r})
"""


def test_a_process_killed_while_writing_a_checkpoint_leaves_the_previous_one_loadable(tmp_path):
    path = str(tmp_path / "agent.pt")
    script = WRITER.format(here=str(HERE), directory=str(tmp_path), path=path)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "saved"
    time.sleep(1.0)  # many saves in flight
    process.send_signal(signal.SIGKILL)
    process.wait()
    agent = build_mappo(wrap_env(lambda: CountingEnv(), num_envs=1), directory=str(tmp_path))
    agent.load(path)
    value = parameters_vector(agent.groups[0].models["policy"])
    assert torch.isfinite(value).all()


def test_a_load_that_fails_late_leaves_the_memory_untouched(tmp_path):
    env = spread()
    agent = build_mappo(env, rollouts=8, directory=str(tmp_path), cfg={"experiment": {"checkpoint_memory": True}})
    from marlparts.trainers import SequentialTrainer

    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 6, "disable_progressbar": True}).train()
    state = agent.state_dict()
    fresh = build_mappo(env, rollouts=8, directory=str(tmp_path))
    SequentialTrainer(env=env, agents=fresh, cfg={"timesteps": 3, "disable_progressbar": True}).train()
    before = fresh.groups[0].memory.get_tensor_by_name("observations").clone()
    del state["rng"]["python"]
    with pytest.raises(KeyError, match="rng"):
        fresh.load_state_dict(state)
    assert fresh.groups[0].memory.memory_index == 3
    assert torch.equal(fresh.groups[0].memory.get_tensor_by_name("observations"), before)
