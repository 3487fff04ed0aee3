"""Cost of MAgent2 battle per env step as the teams grow: env-only stepping against training with the example's settings.

    python benchmarks/battle_scaling.py --map-sizes 20 28 36 45 --steps 300

For each map size (12, 25, 49 and 81 agents a side) it times, in one process and alternating the two
workloads twice, ``--steps`` vectorized steps of ``--num-envs`` copies:

- env only: uniform random actions for every agent, no learning;
- training: ``examples/magent2/battle_mfq_vs_mfac.py``'s MFQ (red) and MFAC (blue) with the example's
  settings, through the trainer (acting, storing, updates), after a warm-up that fills MFQ's
  ``learning_starts`` and runs the first updates of both.

It prints and writes to ``benchmarks/results/battle_scaling.json`` the milliseconds per env step (all
copies counted) of each, per agent step, and the training speed as a fraction of env-only stepping.

It also counts the matrix-product work of one more training chunk (PyTorch's flop counter, untimed) and
times this CPU's product rate on the shape that holds most of it: the first layer's
``(rows, observation + mean action) @ (.., 64)``, the best of a few row counts. Work divided by that rate
is the arithmetic's time per env step with no overhead at all; ``env / (env + arithmetic)`` is then the
most that training in one process on one thread can reach as a fraction of env-only speed, whatever the
code around the arithmetic does.
"""

import argparse
import functools
import json
import pathlib
import statistics
import sys
import tempfile
import time

import torch

from marlparts.trainers import SequentialTrainer

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "magent2"))
import battle_mfq_vs_mfac as example  # noqa: E402  (the example's builders, without running its main)
from throughput import best_matmul_rate, count_flop  # noqa: E402


def env_only(env, steps: int) -> float:
    """Seconds for ``steps`` vectorized steps of uniform random actions."""
    actions_of = {uid: int(env.action_space(uid).n) for uid in env.possible_agents}
    began = time.perf_counter()
    for _ in range(steps):
        env.step({uid: torch.randint(0, n, (env.num_envs, 1)) for uid, n in actions_of.items()})
    return time.perf_counter() - began


def training(trainer: SequentialTrainer, steps: int) -> float:
    """Seconds for ``steps`` more vectorized steps of training."""
    trainer.cfg["timesteps"] = steps
    began = time.perf_counter()
    trainer.train()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--map-sizes", type=int, nargs="+", default=[20, 28, 36, 45])
    parser.add_argument("--steps", type=int, default=300, help="vectorized steps per timing")
    parser.add_argument("--num-envs", type=int, default=None, help="copies (default: the example's)")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "battle_scaling.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    num_envs = args.num_envs or example.NUM_ENVS
    results = []
    for map_size in args.map_sizes:
        with tempfile.TemporaryDirectory() as directory:
            env = example.make_env(num_envs, seed=0, map_size=map_size)  # trained on
            random_env = example.make_env(num_envs, seed=1, map_size=map_size)  # stepped with random actions
            random_env.reset()
            red, blue = example.make_mfq(env, directory), example.make_mfac(env, directory)
            for algorithm in (red, blue):
                algorithm.cfg["experiment"].update(tensorboard=False, csv=False, checkpoint_interval=0)
            trainer = SequentialTrainer(env=env, agents=[red, blue], cfg={"timesteps": 1, "disable_progressbar": True})
            training(trainer, red.cfg["learning_starts"] + 2 * blue.cfg["rollouts"])  # warm-up: updates of both
            env_seconds, train_seconds = [], []
            for _ in range(2):  # alternated
                env_seconds.append(env_only(random_env, args.steps))
                train_seconds.append(training(trainer, args.steps))
            flop_per_env_step = count_flop(functools.partial(training, trainer, args.steps)) / (args.steps * num_envs)
            per_side = len(env.possible_agents) // 2
            acting_rows = num_envs * per_side  # the first layer's rows when a team acts, then larger batches
            rate = best_matmul_rate((acting_rows, 4 * acting_rows, 16 * acting_rows),
                                    in_features=red.models[red.possible_agents[0]]["q"].num_observations)
            env.close()
            random_env.close()
        env_ms = 1000 * statistics.median(env_seconds) / (args.steps * num_envs)
        train_ms = 1000 * statistics.median(train_seconds) / (args.steps * num_envs)
        arithmetic_ms = 1000 * flop_per_env_step / rate
        results.append({"map_size": map_size, "agents_per_side": per_side, "num_envs": num_envs,
                        "env_only_ms_per_env_step": round(env_ms, 3), "training_ms_per_env_step": round(train_ms, 3),
                        "env_only_us_per_agent_step": round(1000 * env_ms / (2 * per_side), 2),
                        "training_us_per_agent_step": round(1000 * train_ms / (2 * per_side), 2),
                        "training_fraction_of_env_only_speed": round(env_ms / train_ms, 3),
                        "training_mflop_per_env_step": round(flop_per_env_step / 1e6, 2),
                        "first_layer_gflop_per_s": round(rate / 1e9, 1),
                        "arithmetic_ms_per_env_step": round(arithmetic_ms, 3),
                        "fraction_bound_without_overhead": round(env_ms / (env_ms + arithmetic_ms), 3)})
        print(json.dumps(results[-1]), flush=True)
    output = pathlib.Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"steps": args.steps, "results": results}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
