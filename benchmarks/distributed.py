"""Data-parallel throughput: the MAPPO example under torchrun with 1 and with 2 ranks.

    python benchmarks/distributed.py --rounds 3 --steps-per-rank 300

Each rank steps its own --num-envs copies in its own process (no worker processes). The runs
alternate (1 rank, 2 ranks, 1 rank, ...) so that drifts in the machine's speed touch both alike;
each run reports the env steps per second of its train() call (all ranks counted), and the
ratio is the summed env steps over the summed seconds of each configuration. Results go to
benchmarks/results/distributed.json.
"""

import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "mpe" / "simple_spread_mappo.py"
RATE = re.compile(r"trained (\d+) env steps on (\d+) rank\(s\) in ([\d.]+) s")


def run(ranks: int, steps_per_rank: int, num_envs: int, directory: str) -> tuple:
    """One torchrun launch; ``(env steps, seconds)`` of its training."""
    timesteps = steps_per_rank * num_envs * ranks
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
                           str(EXAMPLE), "--timesteps", str(timesteps), "--num-envs", str(num_envs), "--episodes", "4",
                           "--directory", directory], capture_output=True, text=True, timeout=3600,
                          env={"TQDM_DISABLE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    match = RATE.search(done.stdout)
    if done.returncode != 0 or match is None:
        raise RuntimeError(f"the {ranks}-rank run failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    steps, _, seconds = match.groups()
    return int(steps), float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps-per-rank", type=int, default=300, help="vectorized steps each rank trains per run")
    parser.add_argument("--num-envs", type=int, default=64, help="env copies per rank (the example's)")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "distributed.json"))
    args = parser.parse_args()
    totals = {1: [0, 0.0], 2: [0, 0.0]}
    runs = []
    with tempfile.TemporaryDirectory() as directory:
        for round_index in range(args.rounds):
            for ranks in ((1, 2) if round_index % 2 == 0 else (2, 1)):
                steps, seconds = run(ranks, args.steps_per_rank, args.num_envs, directory)
                totals[ranks][0] += steps
                totals[ranks][1] += seconds
                runs.append({"ranks": ranks, "env_steps": steps, "seconds": seconds, "rate": steps / seconds})
                print(f"round {round_index}: {ranks} rank(s) {steps / seconds:.0f} env steps/s", flush=True)
    rates = {ranks: steps / seconds for ranks, (steps, seconds) in totals.items()}
    result = {"example": "examples/mpe/simple_spread_mappo.py", "num_envs_per_rank": args.num_envs,
              "steps_per_rank": args.steps_per_rank, "rounds": args.rounds, "runs": runs,
              "env_steps_per_second": {str(k): v for k, v in rates.items()}, "ratio_2_over_1": rates[2] / rates[1]}
    pathlib.Path(args.output).write_text(json.dumps(result, indent=2))
    print(f"1 rank {rates[1]:.0f} env steps/s, 2 ranks {rates[2]:.0f}: {rates[2] / rates[1]:.2f}x")


if __name__ == "__main__":
    main()
