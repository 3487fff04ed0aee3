"""Time to a good policy: wall-clock training time of the MAPPO simple_spread example until its greedy
evaluation first reaches -20 and -15 mean per-agent return, on several seeds.

    python benchmarks/time_to_return.py --seeds 0 1 2 3 4

Each seed trains the example's agent on the example's env (its own ``make_env`` / ``make_agent``) in this
process and evaluates greedily every ``--eval-every`` env steps, ``--episodes`` episodes on separate evaluation
copies that training never sees. The clock counts training only (acting, stepping, storing, updating); the
evaluations are timed apart and left out. A seed that never reaches a level within ``--timesteps`` reports
None for it. Results go to benchmarks/results/time_to_return.json after every seed, with the median and the
maximum over the seeds so far. Run it on an otherwise idle machine.
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
from marlparts.utils import set_seed  # noqa: E402

LEVELS = (-20.0, -15.0)


def time_one_seed(example, seed: int, args: argparse.Namespace, directory: str) -> dict:
    """Train one seed; the training seconds at which each level was first reached, and the curve."""
    set_seed(seed)
    env = example.make_env(args.num_envs or example.NUM_ENVS, args.workers, seed)
    agent = example.make_agent(env, directory, experiment={"tensorboard": False, "csv": False,
                                                           "checkpoint_interval": 0, "directory": directory},
                               **args.overrides)
    every = max(1, args.eval_every // env.num_envs)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={
        "timesteps": args.timesteps // env.num_envs, "eval_interval": every, "eval_episodes": args.episodes,
        "disable_progressbar": True})
    evaluating = {"seconds": 0.0}
    curve, reached = [], {level: None for level in LEVELS}
    began = time.perf_counter()
    evaluate = trainer.eval

    def timed_eval(*eval_args, **eval_kwargs):
        start = time.perf_counter()
        training_seconds = start - began - evaluating["seconds"]  # the evaluations so far left out
        result = evaluate(*eval_args, **eval_kwargs)
        evaluating["seconds"] += time.perf_counter() - start
        curve.append([result["timestep"] * env.num_envs, round(training_seconds, 2), result["mean_return"]])
        for level in LEVELS:
            if reached[level] is None and result["mean_return"] >= level:
                reached[level] = round(training_seconds, 2)
        if all(value is not None for value in reached.values()):
            trainer.stop()
        return result

    trainer.eval = timed_eval
    trainer.train()
    env.close()
    return {"seconds_to": {str(level): value for level, value in reached.items()}, "curve": curve}


def summary(values: list) -> dict:
    """Median and maximum of the seeds that reached a level, and how many did not."""
    reached = [value for value in values if value is not None]
    return {"median": statistics.median(reached) if reached else None, "max": max(reached) if reached else None,
            "not_reached": len(values) - len(reached)}


def parse_override(text: str) -> tuple:
    """``KEY=VALUE`` to ``(KEY, value)``, the value read as JSON (a bare word stays a string)."""
    key, separator, value = text.partition("=")
    if not separator or not key:
        raise SystemExit(f"--set takes KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--timesteps", type=int, default=1_000_000, help="env steps at most per seed")
    parser.add_argument("--eval-every", type=int, default=25_600, help="env steps between greedy evaluations")
    parser.add_argument("--episodes", type=int, default=50, help="greedy episodes per evaluation")
    parser.add_argument("--num-envs", type=int, default=0, help="env copies (default: the example's)")
    parser.add_argument("--workers", type=int, default=0, help="worker processes for the env copies")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one of the example's config values (VALUE read as JSON), e.g. learning_rate=1e-3")
    parser.add_argument("--output", default=str(ROOT / "benchmarks/results/time_to_return.json"))
    args = parser.parse_args()
    args.overrides = dict(parse_override(text) for text in args.set)
    torch.set_num_threads(1)
    example = load_example("examples/mpe/simple_spread_mappo.py")
    record = {"example": "examples/mpe/simple_spread_mappo.py", "workers": args.workers,
              "num_envs": args.num_envs or example.NUM_ENVS, "overrides": args.overrides,
              "eval_every": args.eval_every, "episodes": args.episodes, "seeds": {}}
    output = pathlib.Path(args.output)
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as directory:
            record["seeds"][str(seed)] = result = time_one_seed(example, seed, args, directory)
        for level in LEVELS:
            record[f"to_{level:g}"] = summary([r["seconds_to"][str(level)] for r in record["seeds"].values()])
        output.write_text(json.dumps(record, indent=2))
        print(f"seed {seed}: seconds of training to {LEVELS[0]:g}: {result['seconds_to'][str(LEVELS[0])]}, "
              f"to {LEVELS[1]:g}: {result['seconds_to'][str(LEVELS[1])]}", flush=True)
    for level in LEVELS:
        print(f"to {level:g}: {record[f'to_{level:g}']}")
    print(f"written to {output}")


if __name__ == "__main__":
    main()
