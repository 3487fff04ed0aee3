"""Greedy and sampled returns of an example's agent at several points of training, on several seeds, next to
random play.

    python benchmarks/learning_curve.py --example examples/mpe/simple_speaker_listener_mappo.py \\
        --at 1000000 2000000 --seeds 0 1 2

The example's own ``make_env(num_envs=..., seed=...)`` and ``make_agent(env, directory)`` build each seed's
run in this process. At each point of ``--at`` (env steps, all copies counted) it plays ``--episodes`` episodes
with greedy actions and as many with sampled ones on evaluation copies seeded apart from training, and once
per seed as many episodes of uniform random actions for every agent. The results (per seed and point: mean
return over agents, greedy as ``mean_return`` and sampled as ``sampled_mean_return``, and per agent; over the
seeds: mean, min and max of each) go to ``--output`` after every evaluation. A run resumes the file: its
other seeds are kept, a seed asked for that holds every point is not run again, and one that holds only
some runs again from the start.
"""

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from throughput import load_example  # noqa: E402

from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.trainers.opponents import random_team  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402


def mean_return(report: dict) -> float:
    """The mean over agents of the per-agent mean returns of an evaluation report."""
    return sum(report["returns"].values()) / len(report["returns"])


def run_seed(example, seed: int, args: argparse.Namespace, directory: str, record) -> None:
    """Train one seed, evaluating at every point of ``args.at``."""
    set_seed(seed)
    env = example.make_env(num_envs=args.num_envs or example.NUM_ENVS, seed=seed)
    agent = example.make_agent(env, directory, experiment={"tensorboard": False, "csv": False,
                                                           "checkpoint_interval": 0, "directory": directory})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"disable_progressbar": True, "eval_actions": "both"})
    random_play = trainer.eval(args.episodes, opponents=random_team(env.possible_agents))
    record(seed, "random", {"mean_return": mean_return(random_play), "returns": random_play["returns"]})
    done, seconds = 0, 0.0
    for point in args.at:
        trainer.cfg["timesteps"] = (point - done) // env.num_envs
        began = time.perf_counter()
        trainer.train()
        seconds += time.perf_counter() - began
        done += trainer.cfg["timesteps"] * env.num_envs
        report = trainer.eval(args.episodes)
        record(seed, str(point), {"env_steps": done, "training_seconds": round(seconds, 1),
                                  "mean_return": mean_return(report["greedy"]), "returns": report["greedy"]["returns"],
                                  "sampled_mean_return": mean_return(report["sampled"]),
                                  "sampled_returns": report["sampled"]["returns"]})
    env.close()


def main() -> None:
    """Run the seeds and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", required=True, help="the example script, relative to the repository")
    parser.add_argument("--at", type=int, nargs="+", required=True, help="env steps at which to evaluate")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--num-envs", type=int, default=None, help="env copies (default: the example's)")
    parser.add_argument("--output", required=True, help="the JSON results file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    example = load_example(args.example)
    output = pathlib.Path(args.output)
    report = {"example": args.example, "episodes": args.episodes, "seeds": {}, "summary": {}}
    points = [str(point) for point in args.at]
    if output.exists():  # resume: keep every seed of the file; a seed asked for that misses a point runs again
        earlier = json.loads(output.read_text())
        if (earlier["example"], earlier["episodes"]) != (args.example, args.episodes):
            raise SystemExit(f"{output} holds {earlier['example']} evaluated on {earlier['episodes']} episodes, not "
                             f"{args.example} on {args.episodes}: give another --output")
        report["seeds"] = {seed: runs for seed, runs in earlier["seeds"].items()
                           if int(seed) not in args.seeds or all(point in runs for point in points)}

    def summary(values: list) -> dict:
        return {"mean": statistics.mean(values), "min": min(values), "max": max(values), "seeds": len(values)}

    def summarise() -> None:
        """The statistics over the seeds of every point any seed holds, from the seeds' own results."""
        report["summary"] = {}
        for point in sorted({point for runs in report["seeds"].values() for point in runs},
                            key=lambda point: (point != "random", int(point) if point.isdigit() else 0)):
            runs = [runs[point] for runs in report["seeds"].values() if point in runs]
            report["summary"][point] = summary([run["mean_return"] for run in runs])
            sampled = [run["sampled_mean_return"] for run in runs if "sampled_mean_return" in run]
            if sampled:
                report["summary"][point]["sampled"] = summary(sampled)

    def record(seed: int, point: str, result: dict) -> None:
        report["seeds"].setdefault(str(seed), {})[point] = result
        summarise()
        output.write_text(json.dumps(report, indent=1))
        print(json.dumps({"seed": seed, "point": point, **result}), flush=True)

    summarise()
    with tempfile.TemporaryDirectory() as directory:
        for seed in args.seeds:
            if str(seed) not in report["seeds"]:
                run_seed(example, seed, args, directory, record)
    print(json.dumps(report["summary"], indent=1))


if __name__ == "__main__":
    main()
