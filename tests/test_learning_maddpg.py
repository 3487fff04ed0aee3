"""A short MADDPG learning run on two-agent MPE simple_spread with continuous actions.

Over 100 fresh episodes, standing still scores about -19.8 (mean over agents of the episode
return). After the test's budget MADDPG reaches about -10; the threshold sits between. The
tests marked ``long`` train broken variants on the same budget (actors that minimise Q; no
target networks, i.e. targets from the networks being trained) and check them against it.
"""

import importlib.util
import pathlib
import sys

import pytest
from mpe2 import simple_spread_v3

from marlparts.envs import wrap_env
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUDGET = 100_000  # env steps
THRESHOLD = -14.0


def train_and_evaluate(tmp_path, seed=0, broken=None):
    path = ROOT / "examples" / "mpe" / "simple_spread_maddpg.py"
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))  # the examples import their shared helper module
    spec = importlib.util.spec_from_file_location("example_maddpg", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    set_seed(seed)
    env = wrap_env(lambda: simple_spread_v3.parallel_env(N=2, max_cycles=25, local_ratio=0.5, continuous_actions=True),
                   num_envs=16, seed=seed, state_source="observations")
    agent = example.make_agent(env, str(tmp_path), **({"polyak": 1.0} if broken == "no_target_networks" else {}))
    if broken == "actor_minimises_q":
        original = agent.actor_loss
        agent.actor_loss = lambda batches: -original(batches)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": BUDGET // env.num_envs,
                                                             "disable_progressbar": True})
    trainer.train()
    result = trainer.eval(episodes=100)
    env.close()
    return result["mean_return"]


@pytest.mark.learning
def test_maddpg_learns_simple_spread(tmp_path):
    mean_return = train_and_evaluate(tmp_path)
    print(f"maddpg: greedy mean return {mean_return:.2f} after {BUDGET} env steps")
    assert mean_return > THRESHOLD


@pytest.mark.long
@pytest.mark.parametrize("broken", ["actor_minimises_q", "no_target_networks"])
def test_maddpg_broken_variants(broken, tmp_path):
    mean_return = train_and_evaluate(tmp_path, broken=broken)
    print(f"maddpg with {broken}: greedy mean return {mean_return:.2f}")
    assert mean_return < THRESHOLD
