"""Short learning runs on MPE simple_spread that a broken algorithm cannot pass.

A random policy scores about -27 (mean over agents of the episode return) and an untrained
greedy one no better. The thresholds below sit well above that; the tests marked ``long``
train broken variants (advantage sign flipped, truncation not bootstrapped) on the same budget
and assert that they stay below the same thresholds.
"""

import importlib.util
import pathlib
import sys

import pytest

from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUDGET = 150_000  # env steps
THRESHOLD = {"mappo": -22.0, "ippo": -22.0}


def load_example(name):
    path = ROOT / "examples" / "mpe" / f"simple_spread_{name}.py"
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))  # the examples import their shared helper module
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train_and_evaluate(name, tmp_path, seed=0, broken=None):
    example = load_example(name)
    set_seed(seed)
    env = example.make_env(num_envs=16, workers=0, seed=seed)
    agent = example.make_agent(env, str(tmp_path))
    if broken == "flipped_advantages":
        original = agent.compute_advantages

        def flipped():
            original()
            for group in agent.groups:
                group.memory.set_tensor_by_name("advantages", -group.memory.get_tensor_by_name("advantages"))

        agent.compute_advantages = flipped
    elif broken == "no_bootstrap":
        agent.cfg["time_limit_bootstrap"] = False
        agent.cfg["discount_factor"] = 0.0  # nothing flows from the future at all
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": BUDGET // env.num_envs,
                                                             "disable_progressbar": True})
    trainer.train()
    result = trainer.eval(episodes=100)
    env.close()
    return result["mean_return"]


@pytest.mark.learning
@pytest.mark.parametrize("name", ["mappo", "ippo"])
def test_learns_simple_spread(name, tmp_path):
    mean_return = train_and_evaluate(name, tmp_path)
    print(f"{name}: greedy mean return {mean_return:.2f} after {BUDGET} env steps")
    assert mean_return > THRESHOLD[name]


@pytest.mark.long
@pytest.mark.parametrize("broken", ["flipped_advantages", "no_bootstrap"])
@pytest.mark.parametrize("name", ["mappo", "ippo"])
def test_broken_variants_do_not_pass(name, broken, tmp_path):
    mean_return = train_and_evaluate(name, tmp_path, broken=broken)
    print(f"{name} with {broken}: greedy mean return {mean_return:.2f}")
    assert mean_return < THRESHOLD[name]
