"""Self-play on the turn-based examples, then greedy play against a uniform random legal player on each seat.

    python benchmarks/self_play.py --game tictactoe --seeds 0 1 2
    python benchmarks/self_play.py --game connect_four --seeds 0 1 2 --timesteps 2000000

Each seed trains the example's agent (``examples/pettingzoo/<game>_ippo.py``: its own ``make_env`` and
``make_agent``) by self-play and, every ``--eval-every`` moves, plays ``--games`` greedy games against the random
player on each seat, on evaluation copies seeded apart from training. The clock counts training only. Results
go to benchmarks/results/self_play_<game>.json after every evaluation: per seed, the curve of win / draw / loss
rates per seat; and the final rates' mean, min and max over the seeds.
"""

import argparse
import json
import pathlib
import sys
import tempfile
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from throughput import load_example  # noqa: E402

from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402


def train_one_seed(example, seed: int, args: argparse.Namespace, directory: str, record) -> list:
    """Train one seed by self-play; the evaluation curve."""
    set_seed(seed)
    env = example.make_env(args.num_envs or example.NUM_ENVS, seed)
    agent = example.make_agent(env, directory, experiment={"tensorboard": False, "csv": False,
                                                           "checkpoint_interval": 0, "directory": directory})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": args.eval_every // env.num_envs,
                                                             "disable_progressbar": True})
    curve, seconds, moves = [], 0.0, 0
    for _ in range(max(1, round(args.timesteps / args.eval_every))):  # whole chunks of games, rounded
        began = time.perf_counter()
        trainer.train()
        seconds += time.perf_counter() - began
        moves += trainer.cfg["timesteps"] * env.num_envs
        point = {"moves": moves, "training_seconds": round(seconds, 1),
                 "seats": example.evaluate_against_random(trainer, args.games)}
        curve.append(point)
        record(curve)
        print(json.dumps({"seed": seed, **point}), flush=True)
    env.close()
    return curve


def summary(curves: dict) -> dict:
    """Mean, min and max over the seeds of each seat's final rates."""
    finals = [curve[-1]["seats"] for curve in curves.values()]
    result = {}
    for seat in finals[0]:
        result[seat] = {outcome: {"mean": sum(f[seat][outcome] for f in finals) / len(finals),
                                  "min": min(f[seat][outcome] for f in finals),
                                  "max": max(f[seat][outcome] for f in finals)}
                        for outcome in ("win", "draw", "loss")}
    result["training_seconds"] = [curve[-1]["training_seconds"] for curve in curves.values()]
    return result


def main() -> None:
    """Run the seeds and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--game", choices=["tictactoe", "connect_four"], default="tictactoe")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--timesteps", type=int, default=None, help="moves per seed (default: the example's)")
    parser.add_argument("--eval-every", type=int, default=None, help="moves between evaluations (default: the end)")
    parser.add_argument("--games", type=int, default=1000, help="games per seat and evaluation")
    parser.add_argument("--num-envs", type=int, default=None, help="games played together (default: the example's)")
    parser.add_argument("--output", default=None, help="results file (default: results/self_play_<game>.json)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    example = load_example(f"examples/pettingzoo/{args.game}_ippo.py")
    args.timesteps = args.timesteps or example.TIMESTEPS
    args.eval_every = args.eval_every or args.timesteps
    output = pathlib.Path(args.output or ROOT / "benchmarks" / "results" / f"self_play_{args.game}.json")
    report = {"game": args.game, "timesteps": args.timesteps, "games_per_seat": args.games, "seeds": {}}

    def record_seed(seed):
        def record(curve):
            report["seeds"][str(seed)] = curve
            report["summary"] = summary(report["seeds"])
            output.write_text(json.dumps(report, indent=1))
        return record

    with tempfile.TemporaryDirectory() as directory:
        for seed in args.seeds:
            train_one_seed(example, seed, args, directory, record_seed(seed))
    print(json.dumps(report["summary"], indent=1))


if __name__ == "__main__":
    main()
