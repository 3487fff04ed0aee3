"""How close MAPPO training with 64 copies can come to env-only stepping: the update's fixed cost per
minibatch against its arithmetic.

    python benchmarks/update_floor.py --output benchmarks/results/update_floor.json

The MAPPO example's configuration (64 copies of simple_spread, rollouts of 25, 10 epochs of 4
minibatches, one shared policy and critic) is timed as ``benchmarks/throughput.py`` times it: training
chunks alternated with env-only stepping of the same copies, with the seconds spent in the update
summed. Then the same update (same models, epochs and minibatches) is timed alternately on the
64-copy rollout and on a 1-copy rollout, whose minibatches hold 64 times fewer rows. With an update
that costs ``fixed + rows x per_row`` per minibatch, the 1-copy update is nearly all fixed cost (the
Python and dispatch cost of each operation, whatever its size) and the difference is the arithmetic
the 64-copy minibatches add. The last figure is the ratio to env-only that training would reach if
the update's whole fixed cost were gone and only that arithmetic were left: the ceiling that cutting
overhead alone can reach with this configuration.
"""

import argparse
import json
import pathlib
import sys
import tempfile
from typing import Callable

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))  # the builders of the examples' agents that the tests use too

from spread_agents import make_spread_env  # noqa: E402
from throughput import env_stepper, interleaved_many, training_stepper  # noqa: E402


def update_timer(num_envs: int, directory: str) -> Callable[[int], None]:
    """A function that runs ``n`` updates of the MAPPO example's agent on one stored rollout of ``num_envs`` copies."""
    env = make_spread_env(num_envs)
    train, _, agent = training_stepper("mappo", env, directory)  # one rollout collected, one update run

    def update(n: int) -> None:
        for _ in range(n):
            agent.update(0, 1)

    return update


def main() -> None:
    """Measure, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8, help="alternating rounds of each comparison")
    parser.add_argument("--chunk", type=int, default=50, help="vectorized steps per training chunk")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "update_floor.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    directory = tempfile.mkdtemp()
    report = {"config": "MAPPO example: simple_spread N=3, 64 copies, rollouts 25, 10 epochs x 4 minibatches, "
                        "shared policy and critic", "torch_threads": 1}

    env = make_spread_env(64)
    train, seconds, agent = training_stepper("mappo", env, directory)
    env_only = env_stepper(make_spread_env(64))
    seconds["update"] = 0.0
    train_seconds, env_seconds = interleaved_many([train, env_only], args.chunk, args.rounds)
    timed_steps = args.chunk * (args.rounds + 1)  # the untimed first chunk is in the update's sum too
    update_per_step = seconds["update"] / timed_steps
    report.update(training_steps_per_s=64 / train_seconds, env_only_steps_per_s=64 / env_seconds,
                  training_over_env_only=env_seconds / train_seconds, update_share=update_per_step / train_seconds)

    updates_64, updates_1 = update_timer(64, directory), update_timer(1, directory)
    seconds_64, seconds_1 = interleaved_many([updates_64, updates_1], 1, 2 * args.rounds)
    minibatches = agent.cfg["learning_epochs"] * agent.cfg["mini_batches"]
    arithmetic = max(seconds_64 - seconds_1, 0.0)  # what 64 times the rows add to one update
    rollout_steps = agent.cfg["rollouts"]
    other_per_step = train_seconds - update_per_step  # env, acting, storing, statistics
    ceiling = env_seconds / (other_per_step + arithmetic / rollout_steps)
    report.update(update_ms_64_copies=1000 * seconds_64, update_ms_1_copy=1000 * seconds_1,
                  fixed_ms_per_minibatch=1000 * seconds_1 / minibatches,
                  arithmetic_share_of_update=arithmetic / seconds_64,
                  training_over_env_only_without_fixed_cost=ceiling,
                  outside_update_over_env_only=env_seconds / other_per_step)

    print(f"MAPPO training, 64 copies:      {report['training_steps_per_s']:8.0f} env steps/s")
    print(f"  env-only beside it:           {report['env_only_steps_per_s']:8.0f} env steps/s")
    print(f"  ratio to env-only:            {report['training_over_env_only']:8.1%}")
    print(f"  share of training in update:  {report['update_share']:8.1%}")
    print(f"one update, 64-copy rollout:    {report['update_ms_64_copies']:8.1f} ms")
    print(f"one update, 1-copy rollout:     {report['update_ms_1_copy']:8.1f} ms "
          f"({report['fixed_ms_per_minibatch']:.2f} ms per minibatch)")
    print(f"  arithmetic share of the 64-copy update: {report['arithmetic_share_of_update']:.1%}")
    print(f"ratio to env-only with no fixed cost in the update: {ceiling:.1%}")
    print(f"ratio to env-only of everything but the update:     {report['outside_update_over_env_only']:.1%}")
    pathlib.Path(args.output).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
