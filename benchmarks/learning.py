"""Learning benchmark: train an example's agent for several seeds and evaluate it greedily.

    python benchmarks/learning.py --algorithm mappo --timesteps 1000000 --seeds 0 1 2

For each seed: train for ``--timesteps`` env steps, then run 100 greedy episodes on separate
evaluation copies (seeded from their own stream, so training never saw them) and record the
mean over agents of the episode return. Results are written to a JSON file after every seed
(with the mean, min and max over the seeds so far), so a stopped run keeps what it finished.
"""

import argparse
import importlib.util
import json
import pathlib
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = {
    "mappo": ROOT / "examples/mpe/simple_spread_mappo.py",
    "ippo": ROOT / "examples/mpe/simple_spread_ippo.py",
    "maddpg": ROOT / "examples/mpe/simple_spread_maddpg.py",
    "maddpg_discrete": ROOT / "examples/mpe/simple_spread_maddpg.py",
    "matd3": ROOT / "examples/mpe/simple_spread_matd3.py",
    "qmix": ROOT / "examples/mpe/simple_spread_qmix.py",
    "vdn": ROOT / "examples/mpe/simple_spread_vdn.py",
    "masac": ROOT / "examples/mpe/simple_spread_masac.py",
    "recurrent_mappo": ROOT / "examples/mpe/simple_spread_recurrent_mappo.py",
}


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES[name])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithm", choices=sorted(EXAMPLES), default="mappo")
    parser.add_argument("--timesteps", type=int, default=1_000_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--num-envs", type=int, default=0, help="env copies (default: the example's own)")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--override", default="{}", help="JSON dict of config overrides")
    parser.add_argument("--directory", default="runs/benchmark", help="experiment folder (TensorBoard, checkpoints)")
    parser.add_argument("--output", default=None, help="JSON file (default benchmarks/results/learning_<alg>.json)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    example = load_example(args.algorithm)
    from marlparts.trainers import SequentialTrainer
    from marlparts.utils import set_seed

    output = pathlib.Path(args.output or ROOT / f"benchmarks/results/learning_{args.algorithm}.json")
    output.parent.mkdir(parents=True, exist_ok=True)
    overrides = json.loads(args.override)
    args.num_envs = args.num_envs or example.NUM_ENVS
    task = "simple_spread_v3 N=3 max_cycles=25 local_ratio=0.5" + (" without velocities" if "recurrent" in args.algorithm else "")
    record = {"algorithm": args.algorithm, "task": task,
              "timesteps": args.timesteps, "num_envs": args.num_envs, "overrides": overrides, "seeds": {}}
    for seed in args.seeds:
        set_seed(seed)
        env = (example.make_env(args.num_envs, 0, seed, discrete=True) if args.algorithm == "maddpg_discrete"
               else example.make_env(args.num_envs, 0, seed))
        agent = example.make_agent(env, f"{args.directory}/{args.algorithm}_seed{seed}", **overrides)
        trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": args.timesteps // args.num_envs,
                                                                 "disable_progressbar": True})
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        result = trainer.eval(episodes=args.episodes)
        env.close()
        record["seeds"][str(seed)] = {"greedy_mean_return": result["mean_return"], "train_seconds": seconds}
        values = [v["greedy_mean_return"] for v in record["seeds"].values()]
        record["mean_over_seeds"] = sum(values) / len(values)
        record["min_over_seeds"], record["max_over_seeds"] = min(values), max(values)
        output.write_text(json.dumps(record, indent=2))
        print(f"{args.algorithm} seed {seed}: greedy mean return {result['mean_return']:.2f} "
              f"({seconds:.0f} s); mean over seeds so far {record['mean_over_seeds']:.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
