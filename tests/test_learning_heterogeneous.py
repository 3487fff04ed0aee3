"""Agents of different kinds learn together: MAPPO on MPE simple_speaker_listener (the example's settings).

The speaker sees the target's colour and can only talk; the listener moves and hears it. Over 100 greedy
episodes random actions score about -37 per agent and standing still about -33. After the test's budget
(100k env steps on the example's 64 copies) seed 0 reached -9.3 (and -6.9 at 1M). The threshold sits far
below that and far above doing nothing. The test marked ``long`` trains with the advantages' sign flipped
on the same budget and asserts that it stays below the threshold.
"""

import importlib.util
import pathlib

import pytest
from helpers import greedy_return_after_training

from marlparts.utils import set_seed

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUDGET = 100_000  # env steps
THRESHOLD = -20.0


def load_example():
    path = ROOT / "examples" / "mpe" / "simple_speaker_listener_mappo.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train_and_evaluate(tmp_path, flipped=False):
    example = load_example()
    set_seed(0)
    env = example.make_env(seed=0)
    agent = example.make_agent(env, str(tmp_path), experiment={"tensorboard": False, "csv": False,
                                                               "checkpoint_interval": 0, "directory": str(tmp_path)})
    assert len({id(agent.models[uid]["policy"]) for uid in env.possible_agents}) == 2  # a policy per kind
    assert agent.models["speaker_0"]["value"] is agent.models["listener_0"]["value"]  # one critic
    if flipped:
        original = agent.compute_advantages

        def flipped_advantages():
            original()
            for group in agent.groups:
                group.memory.set_tensor_by_name("advantages", -group.memory.get_tensor_by_name("advantages"))

        agent.compute_advantages = flipped_advantages
    return greedy_return_after_training(env, agent, BUDGET)


@pytest.mark.learning
def test_a_speaker_and_a_listener_learn_to_talk_and_reach_the_target(tmp_path):
    mean_return = train_and_evaluate(tmp_path)
    print(f"speaker-listener MAPPO: greedy mean return {mean_return:.2f} after {BUDGET} env steps")
    assert mean_return > THRESHOLD


@pytest.mark.long
def test_flipped_advantages_do_not_pass(tmp_path):
    mean_return = train_and_evaluate(tmp_path, flipped=True)
    print(f"speaker-listener MAPPO with flipped advantages: greedy mean return {mean_return:.2f}")
    assert mean_return < THRESHOLD
