"""Random play: the return of uniformly random actions on an example's env, the floor a trained agent is read against.

    python benchmarks/random_play.py --example examples/lbf/foraging_mappo.py --env Foraging-10x10-3p-3f-v3

The example's own ``make_env`` builds the env (``--env`` is passed as its task where the example takes
one); ``--episodes`` episodes of uniform random actions for every agent are played on evaluation copies
seeded from each ``--seeds`` seed, exactly as the example's greedy evaluation plays them. Per seed and over
the seeds: the mean return over agents and the return summed over agents. Results go to ``--output``.
"""

import argparse
import json
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from throughput import load_example  # noqa: E402

from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.trainers.opponents import random_team  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", required=True, help="the example script whose make_env builds the env")
    parser.add_argument("--env", default=None, help="the task, for examples whose make_env takes one first")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    example = load_example(ROOT / args.example)
    record = {"example": args.example, "env": args.env, "episodes": args.episodes, "seeds": {}}
    for seed in args.seeds:
        task = {"task": args.env} if args.env else {}
        env = example.make_env(num_envs=example.NUM_ENVS, seed=seed, **task)
        with tempfile.TemporaryDirectory() as directory:
            agent = example.make_agent(env, directory, experiment={"tensorboard": False, "csv": False,
                                                                   "checkpoint_interval": 0, "directory": directory})
            trainer = SequentialTrainer(env=env, agents=agent, cfg={"disable_progressbar": True})
            report = trainer.eval(args.episodes, opponents=random_team(env.possible_agents))
        env.close()
        returns = report["returns"]
        record["seeds"][str(seed)] = {"mean_return": sum(returns.values()) / len(returns),
                                      "total_return": sum(returns.values()), "returns": returns}
        print(f"seed {seed}: mean return {record['seeds'][str(seed)]['mean_return']:.4f}, summed over the agents "
              f"{record['seeds'][str(seed)]['total_return']:.4f}", flush=True)
    totals = [value["total_return"] for value in record["seeds"].values()]
    record["total_return_over_seeds"] = {"mean": sum(totals) / len(totals), "min": min(totals), "max": max(totals)}
    pathlib.Path(args.output).write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
