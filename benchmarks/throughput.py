"""Throughput benchmark: env-only stepping against training, and scaling with the number of agents.

    python benchmarks/throughput.py            # full run, about 4 minutes
    python benchmarks/throughput.py --quick    # smoke run

Figures (env steps per second; one env step = one joint step of one env copy):

1. env-only rate on MPE simple_spread with ``--num-envs`` copies in one process (random actions);
2. env-only rate with the copies in 2 worker processes, and its ratio to (1);
3. MAPPO training rate (the example's config, act + env + record + update) in one process,
   and its ratio to (1); the same for MADDPG (continuous actions, against env-only stepping of
   the continuous task);
4. per-step cost of MAPPO training with shared parameters on a batched synthetic env whose
   step costs nearly nothing, for 3 and 30 agents, and their ratio.

The machine's speed drifts from run to run, so each ratio is the median over ``--repeats`` of
two timings taken back to back; the scaling figures are the best of ``--repeats``. Run it on an
otherwise idle machine. Results go to benchmarks/results/throughput.json.
"""

import argparse
import importlib.util
import json
import os
import pathlib
import platform
import statistics
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples" / "mpe"))  # the examples import their shared helper module

from synthetic import SyntheticEnv  # noqa: E402

from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402


def load_example(path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def random_actions(env, generator):
    """Uniform random actions for every agent, as tensors."""
    actions = {}
    for uid in env.possible_agents:
        space = env.action_space(uid)
        if hasattr(space, "n"):
            action = torch.randint(0, int(space.n), (env.num_envs, 1), generator=generator)
        else:
            low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
            action = low + torch.rand(env.num_envs, *space.shape, generator=generator) * (high - low)
        actions[uid] = action.to(env.device)
    return actions


def env_only_rate(make_env, num_envs: int, workers: int, steps: int, device: str = "cpu") -> float:
    env = make_env(num_envs, workers, 0, device=device)
    env.reset()
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        env.step(random_actions(env, generator))
    start = time.perf_counter()
    for _ in range(steps):
        env.step(random_actions(env, generator))
    seconds = time.perf_counter() - start
    env.close()
    return steps * num_envs / seconds


def training_rate(example, env, steps: int, directory: str, split: dict = None) -> float:
    """Env steps per second of the example's agent training on ``env`` (warm-up update excluded).

    With ``split``, also record the seconds spent inside ``agent.update`` and outside it.
    """
    set_seed(0)
    agent = example.make_agent(env, directory, experiment={"tensorboard": False, "checkpoint_interval": 0,
                                                           "directory": directory})
    warmup_steps = agent.cfg.get("rollouts", agent.cfg.get("learning_starts", 100))
    warmup = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": warmup_steps, "disable_progressbar": True})
    warmup.train()
    update_seconds = [0.0]
    update = agent.update

    def timed_update(*args):
        start = time.perf_counter()
        update(*args)
        update_seconds[0] += time.perf_counter() - start

    agent.update = timed_update
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": steps, "disable_progressbar": True})
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    if split is not None:
        split["update_ms_per_step"] = 1e3 * update_seconds[0] / steps
        split["collect_ms_per_step"] = 1e3 * (seconds - update_seconds[0]) / steps
    return steps * env.num_envs / seconds


def example_training_rate(example, args, directory: str) -> float:
    """Training rate of an example's agent on its own env, copies in this process."""
    env = example.make_env(args.num_envs, 0, 0, device=args.device)
    rate = training_rate(example, env, args.steps, directory)
    env.close()
    return rate


def best(function, repeats: int) -> float:
    return max(function() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=1000, help="vectorized steps per timing (a multiple of 100)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="PyTorch intra-op threads")
    parser.add_argument("--device", default="cpu", help="where the agents' tensors live (cpu, cuda)")
    parser.add_argument("--skip-mpe", action="store_true", help="only the synthetic scaling figures")
    parser.add_argument("--quick", action="store_true", help="short timings, to check the script runs")
    parser.add_argument("--output", default=str(ROOT / "benchmarks/results/throughput.json"))
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats = 200, 1
    torch.set_num_threads(args.threads)
    mappo = load_example(ROOT / "examples/mpe/simple_spread_mappo.py")
    directory = "/tmp/marlparts_throughput"
    results = {"machine": platform.processor() or platform.machine(), "cores": os.cpu_count(), "device": args.device,
               "num_envs": args.num_envs,
               "torch_threads": torch.get_num_threads(), "steps_per_timing": args.steps, "repeats": args.repeats}

    def report(key, value, text):
        results[key] = value
        print(text.format(value), flush=True)

    if not args.skip_mpe:
        mpe_figures(args, mappo, directory, report)
    costs = {}
    for agents in (3, 30):
        runs = []
        for _ in range(args.repeats):
            split = {}
            env = SyntheticEnv(agents, num_envs=args.num_envs, device=args.device)
            rate = training_rate(mappo, env, args.steps, directory, split)
            runs.append((rate, split))
        rate, split = max(runs, key=lambda run: run[0])
        costs[agents] = 1e3 * args.num_envs / rate
        report(f"mappo_ms_per_step_{agents}_agents", costs[agents],
               f"MAPPO per vectorized step, {agents:2d} agents (synthetic env): {{:6.2f}} ms")
        report(f"mappo_collect_ms_per_step_{agents}_agents", split["collect_ms_per_step"],
               "  of which act + env + record + trainer:             {:6.2f} ms")
        report(f"mappo_update_ms_per_step_{agents}_agents", split["update_ms_per_step"],
               "  of which the update, amortised:                    {:6.2f} ms")
    report("scaling_30_over_3_agents", costs[30] / costs[3], "  growth from 3 to 30 agents:     {:8.2f}x (bar <= 2)")
    report("collect_scaling_30_over_3_agents",
           results["mappo_collect_ms_per_step_30_agents"] / results["mappo_collect_ms_per_step_3_agents"],
           "  growth of act + env + record:   {:8.2f}x")

    output = pathlib.Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2))
    print(f"written to {output}")


def paired(numerator, denominator, repeats: int):
    """Median ratio of ``numerator()`` to ``denominator()`` timed back to back, ``repeats`` times,
    and the median of each: the machine's speed drifts between runs, a ratio of neighbours does not."""
    pairs = [(numerator(), denominator()) for _ in range(repeats)]
    return (statistics.median(a / b for a, b in pairs), statistics.median(a for a, _ in pairs),
            statistics.median(b for _, b in pairs))


def mpe_figures(args, mappo, directory, report) -> None:
    """Env-only and training rates on MPE simple_spread, each ratio from back-to-back timings."""
    single = lambda: env_only_rate(mappo.make_env, args.num_envs, 0, args.steps, args.device)  # noqa: E731
    workers = lambda: env_only_rate(mappo.make_env, args.num_envs, args.workers, args.steps, args.device)  # noqa: E731
    ratio, worker_rate, env_rate = paired(workers, single, args.repeats)
    report("env_only_steps_per_s", env_rate, "env-only, one process:           {:8.0f} env steps/s")
    report("env_only_workers_steps_per_s", worker_rate,
           f"env-only, {args.workers} worker processes:      {{:8.0f}} env steps/s")
    report("workers_over_single_process", ratio, "  ratio to one process:           {:8.2f}x (bar >= 1.3)")

    ratio, train_rate, env_rate = paired(lambda: example_training_rate(mappo, args, directory), single, args.repeats)
    report("mappo_training_steps_per_s", train_rate, "MAPPO training, one process:     {:8.0f} env steps/s")
    report("mappo_env_only_steps_per_s", env_rate, "  env-only beside it:             {:8.0f} env steps/s")
    report("mappo_over_env_only", ratio, "  ratio to env-only:              {:8.1%} (bar >= 70%)")

    maddpg = load_example(ROOT / "examples/mpe/simple_spread_maddpg.py")
    continuous = lambda: env_only_rate(maddpg.make_env, args.num_envs, 0, args.steps, args.device)  # noqa: E731
    ratio, train_rate, env_rate = paired(lambda: example_training_rate(maddpg, args, directory), continuous,
                                         args.repeats)
    report("maddpg_training_steps_per_s", train_rate, "MADDPG training, one process:    {:8.0f} env steps/s")
    report("maddpg_env_only_steps_per_s", env_rate, "  env-only beside it (continuous): {:7.0f} env steps/s")
    report("maddpg_over_env_only", ratio, "  ratio to env-only:              {:8.1%} (bar >= 50%)")


if __name__ == "__main__":
    main()
