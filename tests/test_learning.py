"""Short learning runs on MPE simple_spread that a broken algorithm cannot pass.

The task has two agents and two landmarks (the three-agent task needs far more steps before returns
separate from trivial policies). Over 100 greedy evaluation episodes, standing still scores about
-19.8 (mean over agents of the episode return) and random actions about -21.2. After the test's
budget, with the examples' configurations on 64 copies, MAPPO reached -6.6 / -11.3 / -6.2 and IPPO
-8.3 / -14.3 / -7.0 on seeds 0 / 1 / 2 (MAPPO with 2 minibatches; with the 4 it now uses, -5.7 on
seed 0, and IPPO -6.1; with the MAPPO example's present learning rate 1.5e-3 and discount 0.95,
-5.65 on seed 0); the threshold sits below them and above standing still. The tests marked ``long``
train broken variants on the same budget (advantage sign flipped; discount 0, so no value flows from
the future) and assert that they stay below the same threshold: they reached MAPPO -51.9 / -21.8 and
IPPO -48.7 / -28.9. A value normaliser updated before the epochs (a defect of an earlier version,
which left most samples without a value gradient) still reached -6.1 here: this budget cannot tell
it apart, so ``test_ppo_units.py`` pins it instead. VDAC, with its example's settings, reached -5.81 on
seed 0, and its broken variants -59.38 (advantages flipped) and -21.79 (discount 0).
"""

import pytest
from helpers import greedy_return_after_training
from spread_agents import COPIES, make_spread_agent, make_spread_env

from marlparts.utils import set_seed

BUDGET = 500_000  # env steps
THRESHOLD = -17.5


def train_and_evaluate(name, tmp_path, seed=0, broken=None):
    set_seed(seed)
    env = make_spread_env(COPIES[name], seed=seed, agents=2)
    agent = make_spread_agent(name, env, str(tmp_path), **({"discount_factor": 0.0} if broken == "myopic" else {}))
    if broken == "flipped_advantages":
        original = agent.compute_advantages

        def flipped():
            original()
            for group in agent.groups:
                group.memory.set_tensor_by_name("advantages", -group.memory.get_tensor_by_name("advantages"))

        agent.compute_advantages = flipped
    return greedy_return_after_training(env, agent, BUDGET)


@pytest.mark.learning
@pytest.mark.parametrize("name", ["mappo", "ippo", "vdac"])
def test_learns_simple_spread(name, tmp_path):
    mean_return = train_and_evaluate(name, tmp_path)
    print(f"{name}: greedy mean return {mean_return:.2f} after {BUDGET} env steps")
    assert mean_return > THRESHOLD


@pytest.mark.long
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", ["mappo", "ippo"])
def test_learns_simple_spread_on_other_seeds(name, seed, tmp_path):
    mean_return = train_and_evaluate(name, tmp_path, seed=seed)
    print(f"{name} seed {seed}: greedy mean return {mean_return:.2f}")
    assert mean_return > THRESHOLD


@pytest.mark.long
@pytest.mark.parametrize("broken", ["flipped_advantages", "myopic"])
@pytest.mark.parametrize("name", ["mappo", "ippo", "vdac"])
def test_broken_variants_do_not_pass(name, broken, tmp_path):
    mean_return = train_and_evaluate(name, tmp_path, broken=broken)
    print(f"{name} with {broken}: greedy mean return {mean_return:.2f}")
    assert mean_return < THRESHOLD
