"""Learning benchmark: run an example script as it stands for several seeds and collect its greedy evaluation.

    python benchmarks/learning.py --algorithm mappo --timesteps 1000000 --seeds 0 1 2 3 4

For each seed the example trains for ``--timesteps`` env steps, then runs 100 greedy episodes on
separate evaluation copies (seeded from their own stream, so training never saw them); the mean
over agents of the episode return is read from the ``evaluation.json`` it writes, and the curve of the
evaluations during training (every ``eval_interval``) from its ``scalars.csv``. Results are
written to a JSON file after every seed (with the mean, min and max over the seeds so far), so a
stopped run keeps what it finished. ``--example-args`` passes further options to the example
(``--discrete`` for MADDPG's discrete task, ``--feed-forward`` for the recurrent example's
comparison).
"""

import argparse
import csv
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = {name: ROOT / "examples" / "mpe" / f"simple_spread_{name}.py"
            for name in ("mappo", "ippo", "happo", "vdac", "coma", "maddpg", "matd3", "masac", "qmix", "vdn",
                         "recurrent_mappo")}
EXAMPLES["speaker_listener_happo"] = ROOT / "examples" / "mpe" / "simple_speaker_listener_happo.py"
EXAMPLES["vmas_balance_mappo"] = ROOT / "examples" / "vmas" / "balance_mappo.py"
EXAMPLES["lbf_mappo"] = ROOT / "examples" / "lbf" / "foraging_mappo.py"
EXAMPLES["lbf_vdn"] = ROOT / "examples" / "lbf" / "foraging_vdn.py"
EXAMPLES["rware_mappo"] = ROOT / "examples" / "rware" / "warehouse_mappo.py"
TRAINED = re.compile(r"trained (\d+) env steps(?: on \d+ rank\(s\))? in ([\d.]+) s")


def run_example(algorithm: str, seed: int, timesteps: int, episodes: int, directory: str, extra: list) -> dict:
    """Train and evaluate one seed; the example's evaluation report and its training time."""
    done = subprocess.run([sys.executable, str(EXAMPLES[algorithm]), "--seed", str(seed), "--timesteps", str(timesteps),
                           "--episodes", str(episodes), "--directory", directory, *extra],
                          capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"})
    trained = TRAINED.search(done.stdout)
    if done.returncode != 0 or trained is None:
        raise RuntimeError(f"{algorithm} seed {seed} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    (report_path,) = pathlib.Path(directory).glob("*/evaluation.json")
    report = json.loads(report_path.read_text())
    env_steps_per_timestep = int(trained.group(1)) / max(int(report["timestep"]), 1)
    return {"greedy_mean_return": report["mean_return"], "std_over_episodes": report["std_return"],
            "greedy_total_return": sum(report["returns"].values()),  # summed over the agents (LBF's figure)
            "episodes": report["episodes"], "train_seconds": float(trained.group(2)),
            "curve": evaluation_curve(report_path.parent / "scalars.csv", env_steps_per_timestep)}


def evaluation_curve(scalars: pathlib.Path, env_steps_per_timestep: float) -> list:
    """``[env steps, greedy mean return]`` of every evaluation during training (the example's
    ``eval_interval``), read from the run's ``scalars.csv``; empty where the run wrote none."""
    if not scalars.exists():
        return []
    with scalars.open() as file:
        return [[round(int(row["step"]) * env_steps_per_timestep), float(row["value"])]
                for row in csv.DictReader(file) if row["tag"] == "Evaluation / return (team)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithm", choices=sorted(EXAMPLES), default="mappo")
    parser.add_argument("--timesteps", type=int, default=1_000_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--example-args", default="", help="further options for the example, e.g. '--discrete'")
    parser.add_argument("--name", default=None, help="the result's name (default: the algorithm)")
    parser.add_argument("--output", default=None, help="JSON file (default benchmarks/results/learning_<name>.json)")
    args = parser.parse_args()

    name = args.name or args.algorithm
    output = pathlib.Path(args.output or ROOT / f"benchmarks/results/learning_{name}.json")
    output.parent.mkdir(parents=True, exist_ok=True)
    extra = shlex.split(args.example_args)
    record = {"algorithm": args.algorithm, "example": str(EXAMPLES[args.algorithm].relative_to(ROOT)),
              "example_args": extra, "timesteps": args.timesteps, "seeds": {}}
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as directory:
            record["seeds"][str(seed)] = result = run_example(args.algorithm, seed, args.timesteps, args.episodes,
                                                              directory, extra)
        values = [v["greedy_mean_return"] for v in record["seeds"].values()]
        record["mean_over_seeds"] = sum(values) / len(values)
        record["min_over_seeds"], record["max_over_seeds"] = min(values), max(values)
        totals = [v["greedy_total_return"] for v in record["seeds"].values()]
        record["total_return_over_seeds"] = {"mean": sum(totals) / len(totals), "min": min(totals), "max": max(totals)}
        output.write_text(json.dumps(record, indent=2))
        print(f"{name} seed {seed}: greedy mean return {result['greedy_mean_return']:.3f}, summed over the agents "
              f"{result['greedy_total_return']:.3f} "
              f"({result['train_seconds']:.0f} s); mean over seeds so far {record['mean_over_seeds']:.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
