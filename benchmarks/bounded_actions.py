"""Bounded continuous actions for PPO: the clipped Gaussian against the tanh-squashed Gaussian.

    python benchmarks/bounded_actions.py --seeds 0 1 2

Trains the VMAS balance example (MAPPO, 3 agents, forces bounded to the action Box) with each kind
of policy, with the settings of its learning test (``tests/test_vmas.py``: rollouts of 16 on 128
copies, 100k env steps): ``clipped``, the example's own (a Gaussian whose samples are clipped into the Box; the
log-probability is that of the unclipped sample), and ``squashed``, the same network under
:class:`marlparts.models.SquashedGaussianMixin` (samples squashed by tanh into the Box, with the
change of variables in the log-probability). Each run trains ``--timesteps`` env steps on
``--num-envs`` copies, then evaluates greedy actions on 128 episodes of copies seeded apart from
training. Results go to ``benchmarks/results/bounded_actions.json`` after every run; runs already
there are not repeated.
"""

import argparse
import importlib.util
import json
import pathlib
import tempfile
import time

import torch

from marlparts.models import SquashedGaussianMixin
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "bounded_actions.json"
VARIANTS = ["clipped", "squashed"]


def load_example():
    """The VMAS balance example as a module (its Policy, make_env and make_agent)."""
    spec = importlib.util.spec_from_file_location("balance_example", ROOT / "examples" / "vmas" / "balance_mappo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(example, seed: int, variant: str, timesteps: int, num_envs: int) -> dict:
    """Train one seed with one kind of policy and evaluate it."""
    if variant == "squashed":
        class SquashedPolicy(SquashedGaussianMixin, example.Policy):
            """The example's network, its samples squashed by tanh into the action Box."""

        example_policy, example.Policy = example.Policy, SquashedPolicy
    set_seed(seed)
    env = example.make_env(num_envs, seed)
    try:
        with tempfile.TemporaryDirectory() as directory:
            agent = example.make_agent(env, directory, rollouts=16)
            trainer = SequentialTrainer(env=env, agents=agent, cfg={
                "timesteps": timesteps // num_envs, "disable_progressbar": True, "eval_actions": "greedy"})
            began = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - began
            report = trainer.eval(episodes=128)
    finally:
        if variant == "squashed":
            example.Policy = example_policy
        env.close()
    return {"seed": seed, "variant": variant, "env_steps": timesteps, "num_envs": num_envs,
            "greedy_return": report["mean_return"], "train_seconds": round(seconds, 1)}


def main() -> None:
    """Run every (seed, variant) not yet in the results file, alternating the variants, writing after each."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--timesteps", type=int, default=100_000)
    parser.add_argument("--num-envs", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"runs": []}
    done = {(entry["seed"], entry["variant"], entry["env_steps"], entry["num_envs"]) for entry in results["runs"]}
    example = load_example()
    for seed in args.seeds:
        for variant in args.variants:
            if (seed, variant, args.timesteps, args.num_envs) in done:
                continue
            entry = run(example, seed, variant, args.timesteps, args.num_envs)
            print(json.dumps(entry), flush=True)
            results["runs"].append(entry)
            RESULTS.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
