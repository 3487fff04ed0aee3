"""Throughput benchmark: env-only stepping against training, and scaling with the number of agents.

    python benchmarks/throughput.py            # full run, about 6 minutes
    python benchmarks/throughput.py --quick    # smoke run

Figures (env steps per second; one env step = one joint step of one env copy):

1. env-only rate on MPE simple_spread in one process (random actions), with the MAPPO
   example's number of copies;
2. env-only rate with the same copies in ``--workers`` worker processes, and its ratio to (1);
3. MAPPO training rate (the example's config: act + env + record + update) in one process,
   and its ratio to env-only stepping of the same copies, the share of its time in the update and the
   share its matrix products alone would take at the rate of one hidden-layer product of a minibatch
   (the rest of the update is the cost of its many small operations); the same for MADDPG (its example's
   config and copies, continuous actions, against env-only stepping of the continuous task);
4. per-step cost of MAPPO training with shared parameters on a batched synthetic env whose
   step costs nearly nothing, for 3 and 30 agents, and their ratio; with the matrix-product
   work per step (PyTorch's flop counter) and the rate a hidden layer's product alone reaches,
   to tell arithmetic from overhead. ``--scaling-copies`` and ``--scaling-threads`` repeat it
   for several numbers of copies and PyTorch threads;
5. MAPPO with each agent's own policy and critic (stacked into one batched computation) against
   shared models, 64 copies; and the work of a one-copy library (1 copy, per-agent models, rollouts
   of 125, 10 epochs x 4 minibatches) stacked against one model at a time (``cfg["stack_models"]``
   off); each beside env-only stepping of the same copies;
6. MAPPO training on VMAS balance with the example's settings, against env-only stepping of the
   same copies (random actions), at 512 and 4096 copies (``--vmas-copies``); with the matrix-product work
   of one rollout and its update (PyTorch's flop counter) and the bound it sets: env / (env + that work at
   the best rate of a hidden layer's product), the most training on one thread could reach with no
   overhead at all.

This machine's speed drifts by tens of percent from minute to minute, so two rates are never
timed far apart: each comparison alternates short chunks of the two workloads (A B B A ...)
for ``--rounds`` rounds and divides the summed times. Run it on an otherwise idle machine.
Results go to benchmarks/results/throughput.json.
"""

import argparse
import functools
import importlib.util
import json
import os
import pathlib
import platform
import sys
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch
from torch.utils.flop_counter import FlopCounterMode

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))  # the builders of the examples' agents that the tests use too

from spread_agents import COPIES, make_spread_agent, make_spread_env  # noqa: E402
from synthetic import SyntheticEnv  # noqa: E402

from marlparts.agents import MultiAgent  # noqa: E402
from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402


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


def env_stepper(env) -> Callable[[int], None]:
    """A function that steps ``env`` ``n`` times with random actions."""
    env.reset()
    generator = torch.Generator().manual_seed(0)

    def step(n: int) -> None:
        for _ in range(n):
            env.step(random_actions(env, generator))
    return step


def training_stepper(name: str, env, directory: str, *, count_work: bool = False, **agent_options: Any
                     ) -> Tuple[Callable[[int], None], Dict[str, float], MultiAgent]:
    """A function that trains the agent ``name`` (the example's configuration) on ``env`` for ``n`` vectorized steps, a dict
    whose ``"update"`` sums the seconds spent inside ``agent.update``, and the agent. One warm-up
    update runs first; with ``count_work`` a second one is run under PyTorch's flop counter and
    the dict's ``"flop_per_step"`` holds its matrix-product work per vectorized step. ``agent_options`` go to
    ``make_spread_agent`` (``separate_models``, config overrides)."""
    set_seed(0)
    agent = make_spread_agent(name, env, directory, experiment={"tensorboard": False, "csv": False,
                                                                "checkpoint_interval": 0, "directory": directory},
                              **agent_options)

    trainer = SequentialTrainer(env=env, agents=agent, cfg={"disable_progressbar": True})

    def train(n: int) -> None:  # one trainer: the chunks continue one run
        trainer.cfg["timesteps"] = n
        trainer.train()

    warmup_steps = agent.cfg.get("rollouts", agent.cfg.get("learning_starts", 100))
    train(warmup_steps)
    stats = {"update": 0.0}
    if count_work:
        stats["flop_per_step"] = count_flop(lambda: train(warmup_steps)) / warmup_steps
    update = agent.update

    def timed_update(*args):
        start = time.perf_counter()
        update(*args)
        stats["update"] += time.perf_counter() - start

    agent.update = timed_update
    return train, stats, agent


def count_flop(function: Callable[[], None]) -> float:
    """Floating-point operations (matrix products and convolutions, as PyTorch's flop counter
    counts them) that ``function`` performs."""
    with FlopCounterMode(display=False) as counter:
        function()
    return float(counter.get_total_flops())


def matmul_rate(rows: int, repeats: int = 50, *, in_features: int = 64, out_features: int = 64) -> float:
    """FLOP/s of a ``(rows, in_features) @ (in_features, out_features)`` product; by default the shape of a
    hidden layer of the examples."""
    inputs, weight = torch.randn(rows, in_features), torch.randn(in_features, out_features)
    output = torch.empty(rows, out_features)
    for _ in range(5):
        torch.mm(inputs, weight, out=output)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.mm(inputs, weight, out=output)
    return 2 * rows * in_features * out_features * repeats / (time.perf_counter() - start)


def best_matmul_rate(row_counts: Sequence[int], *, in_features: int = 64) -> float:
    """The best FLOP/s of ``(rows, in_features) @ (in_features, 64)`` over ``row_counts``: an optimistic rate, so the
    arithmetic time it gives is a lower bound."""
    return max(matmul_rate(rows, in_features=in_features) for rows in row_counts)


def interleaved(first: Callable[[int], None], second: Callable[[int], None], chunk: int, rounds: int) -> Tuple[float, float]:
    """Seconds per call-step of ``first`` and ``second``, timed in alternating chunks of ``chunk``
    steps (A B B A A B ...), after one untimed chunk of each."""
    first_seconds, second_seconds = interleaved_many([first, second], chunk, rounds)
    return first_seconds, second_seconds


def interleaved_many(functions: List[Callable[[int], None]], chunk: int, rounds: int) -> List[float]:
    """Seconds per call-step of each of ``functions``, timed in chunks of ``chunk`` steps whose order
    reverses every round (A B C C B A ...), after one untimed chunk of each."""
    for function in functions:
        function(chunk)
    totals = [0.0] * len(functions)
    for round_index in range(rounds):
        order = list(enumerate(functions))
        for slot, function in order if round_index % 2 == 0 else reversed(order):
            start = time.perf_counter()
            function(chunk)
            totals[slot] += time.perf_counter() - start
    return [total / (chunk * rounds) for total in totals]


def mpe_figures(args, report) -> None:
    """Env-only and training rates on MPE simple_spread, each pair timed in alternating chunks."""
    num_envs = args.num_envs or COPIES["mappo"]
    single_env = make_spread_env(num_envs, device=args.device)
    worker_env = make_spread_env(num_envs, device=args.device, workers=args.workers)
    single = env_stepper(single_env)
    single_seconds, worker_seconds = interleaved(single, env_stepper(worker_env), args.chunk, args.rounds)
    worker_env.close()
    report("mappo_num_envs", num_envs, "MPE simple_spread, {} copies")
    report("env_only_steps_per_s", num_envs / single_seconds, "env-only, one process:           {:8.0f} env steps/s")
    report("env_only_workers_steps_per_s", num_envs / worker_seconds,
           f"env-only, {args.workers} worker processes:      {{:8.0f}} env steps/s")
    report("workers_over_single_process", single_seconds / worker_seconds,
           "  ratio to one process:           {:8.2f}x (bar >= 1.3)")

    train_env = make_spread_env(num_envs, device=args.device)
    train, seconds, agent = training_stepper("mappo", train_env, args.directory, count_work=True)
    train_seconds, env_seconds = interleaved(train, single, args.chunk, args.rounds)
    train_env.close()
    single_env.close()
    report("mappo_training_steps_per_s", num_envs / train_seconds, "MAPPO training, one process:     {:8.0f} env steps/s")
    report("mappo_env_only_steps_per_s", num_envs / env_seconds, "  env-only beside it:             {:8.0f} env steps/s")
    report("mappo_over_env_only", env_seconds / train_seconds, "  ratio to env-only:              {:8.1%} (bar >= 70%)")
    report("mappo_update_share", seconds["update"] / (train_seconds * args.chunk * (args.rounds + 1)),
           "  share of training time in update: {:6.1%}")
    # the update's arithmetic: its matrix products at the rate one hidden-layer product of a minibatch reaches
    rows = len(agent.possible_agents) * num_envs * agent.cfg["rollouts"] // agent.cfg["mini_batches"]
    report("mappo_matmul_share", seconds["flop_per_step"] / matmul_rate(rows) / train_seconds,
           f"  matrix products alone, at the rate of a ({rows}, 64) @ (64, 64) product: {{:.1%}} of training time")

    num_envs = args.num_envs or COPIES["maddpg"]
    train_env = make_spread_env(num_envs, continuous=True, device=args.device)
    single_env = make_spread_env(num_envs, continuous=True, device=args.device)
    train, _, _ = training_stepper("maddpg", train_env, args.directory)
    train_seconds, env_seconds = interleaved(train, env_stepper(single_env), args.chunk, args.rounds)
    train_env.close()
    single_env.close()
    report("maddpg_num_envs", num_envs, "MADDPG, {} copies")
    report("maddpg_training_steps_per_s", num_envs / train_seconds, "MADDPG training, one process:    {:8.0f} env steps/s")
    report("maddpg_env_only_steps_per_s", num_envs / env_seconds, "  env-only beside it (continuous): {:7.0f} env steps/s")
    report("maddpg_over_env_only", env_seconds / train_seconds, "  ratio to env-only:              {:8.1%} (bar >= 50%)")


def separate_models_figures(args, report) -> None:
    """MAPPO with each agent's own policy and critic against the same config with shared models (the
    example's: 64 copies), and the same work as a one-copy library (one copy, per-agent models, rollouts of
    125 steps, 10 epochs x 4 minibatches) run with stacked models and one model at a time; each set timed in
    alternating chunks beside env-only stepping of the same copies."""
    num_envs = args.num_envs or COPIES["mappo"]
    env_only = env_stepper(make_spread_env(num_envs, device=args.device))
    shared, _, _ = training_stepper("mappo", make_spread_env(num_envs, device=args.device), args.directory)
    separate, _, _ = training_stepper("mappo", make_spread_env(num_envs, device=args.device), args.directory,
                                      separate_models=True)
    shared_s, separate_s, env_s = interleaved_many([shared, separate, env_only], args.chunk, args.rounds)
    report("separate_models_num_envs", num_envs, "MAPPO with each agent's own models, {} copies")
    report("separate_models_steps_per_s", num_envs / separate_s, "  own models (stacked):           {:8.0f} env steps/s")
    report("shared_models_steps_per_s", num_envs / shared_s, "  shared models:                  {:8.0f} env steps/s")
    report("separate_models_env_only_steps_per_s", num_envs / env_s, "  env-only beside them:           {:8.0f} env steps/s")
    report("separate_over_shared", shared_s / separate_s, "  own over shared:                {:8.1%} (bar >= 85%)")
    report("separate_over_env_only", env_s / separate_s, "  own over env-only:              {:8.1%}")
    report("shared_over_env_only", env_s / shared_s, "  shared over env-only:           {:8.1%}")

    same_work = {"separate_models": True, "rollouts": 125, "learning_epochs": 10, "mini_batches": 4}
    env_only = env_stepper(make_spread_env(1, device=args.device))
    stacked, _, _ = training_stepper("mappo", make_spread_env(1, device=args.device), args.directory, **same_work)
    one_by_one, _, _ = training_stepper("mappo", make_spread_env(1, device=args.device), args.directory,
                                        stack_models=False, **same_work)
    chunk = 125 * max(1, args.chunk // 100)
    stacked_s, one_by_one_s, env_s = interleaved_many([stacked, one_by_one, env_only], chunk, args.rounds)
    report("same_work_stacked_steps_per_s", 1 / stacked_s,
           "same work as a one-copy library (1 copy, own models, 125 x 10 x 4): stacked {:6.0f} env steps/s")
    report("same_work_one_by_one_steps_per_s", 1 / one_by_one_s, "  one model at a time:            {:8.0f} env steps/s")
    report("same_work_env_only_steps_per_s", 1 / env_s, "  env-only (1 copy) beside them:  {:8.0f} env steps/s")
    report("same_work_stacked_over_one_by_one", one_by_one_s / stacked_s,
           "  stacked over one at a time:     {:8.2f}x (bar >= 3x)")
    report("same_work_stacked_over_env_only", env_s / stacked_s, "  stacked over env-only:          {:8.1%}")
    report("same_work_one_by_one_over_env_only", env_s / one_by_one_s, "  one at a time over env-only:    {:8.1%}")


def load_example(relative_path: str):
    """The module of an example script (its ``make_env`` / ``make_agent``: the example's own settings)."""
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def vmas_figures(args, report) -> None:
    """MAPPO training on VMAS balance (the example's settings) against env-only stepping of the same copies,
    for each number of copies in ``--vmas-copies``; timed in alternating chunks of one rollout each."""
    example = load_example("examples/vmas/balance_mappo.py")
    for num_envs in args.vmas_copies:
        env_only = env_stepper(example.make_env(num_envs, seed=1, device=args.device))
        env = example.make_env(num_envs, seed=0, device=args.device)
        set_seed(0)
        agent = example.make_agent(env, args.directory, experiment={
            "tensorboard": False, "csv": False, "checkpoint_interval": 0, "directory": args.directory})
        trainer = SequentialTrainer(env=env, agents=agent, cfg={"disable_progressbar": True})

        def train(n: int, trainer: SequentialTrainer = trainer) -> None:
            trainer.cfg["timesteps"] = n
            trainer.train()

        rollout = agent.cfg["rollouts"]
        chunk = max(rollout, args.chunk // rollout * rollout)
        train(rollout)  # warm-up: one whole rollout and its update, then its work counted on the next
        flop_per_env_step = count_flop(functools.partial(train, rollout)) / (rollout * num_envs)
        train_seconds, env_seconds = interleaved(train, env_only, chunk, args.rounds)
        report(f"vmas_balance_{num_envs}_copies_training_steps_per_s", num_envs / train_seconds,
               f"VMAS balance, {num_envs} copies, MAPPO training: {{:8.0f}} env steps/s")
        report(f"vmas_balance_{num_envs}_copies_env_only_steps_per_s", num_envs / env_seconds,
               "  env-only beside it (random actions):   {:8.0f} env steps/s")
        report(f"vmas_balance_{num_envs}_copies_training_over_env_only", env_seconds / train_seconds,
               "  ratio to env-only:                      {:8.1%} (bar >= 65% at 512 copies)")
        # the bound the matrix products alone set: their work at the best rate of a hidden layer's product
        rows = len(agent.possible_agents) * num_envs * rollout // agent.cfg["mini_batches"]
        arithmetic_seconds = flop_per_env_step / best_matmul_rate((rows // 4, rows)) * num_envs
        report(f"vmas_balance_{num_envs}_copies_mflop_per_env_step", flop_per_env_step / 1e6,
               "  matrix products per env step:           {:8.3f} MFLOP")
        report(f"vmas_balance_{num_envs}_copies_bound_without_overhead",
               env_seconds / (env_seconds + arithmetic_seconds),
               "  env / (env + matrix products alone):    {:8.1%} (the most one thread can reach)")


def vmas_reset_figures(args, report) -> None:
    """What resetting some VMAS balance copies costs: one ``reset_at`` per copy, the wrapper's vectorised reset
    of 8 copies, and one step of all copies, at 512 copies (milliseconds, means of 50 calls)."""
    import vmas

    from marlparts.envs.vmas_reset import CopyResetter

    env = vmas.make_env("balance", num_envs=512, device=args.device, continuous_actions=True, max_steps=100,
                        terminated_truncated=True, n_agents=3, seed=0)
    env.reset()
    ended = torch.zeros(512, dtype=torch.bool, device=args.device)
    ended[::64] = True  # 8 copies
    resetter, still = CopyResetter(env), [torch.zeros(512, 2, device=args.device)] * 3
    timings = {"reset_at_one_copy": lambda: env.reset_at(7, return_observations=False),
               "vectorised_reset_of_8_copies": lambda: resetter.reset(ended),
               "step_of_512_copies": lambda: env.step(still)}
    for name, call in timings.items():
        call()
        start = time.perf_counter()
        for _ in range(50):
            call()
        report(f"vmas_balance_ms_{name}", 1e3 * (time.perf_counter() - start) / 50,
               f"VMAS balance, 512 copies, {name.replace('_', ' ')}: {{:6.2f}} ms")


def scaling_figures(args, report) -> None:
    """MAPPO's per-step cost on the synthetic env with 3 and 30 agents, timed in alternating chunks,
    for each number of copies in ``--scaling-copies`` and each thread count in ``--scaling-threads``."""
    copies_list = args.scaling_copies or [args.num_envs or COPIES["mappo"]]
    for threads in args.scaling_threads or [args.threads]:
        torch.set_num_threads(threads)
        for num_envs in copies_list:
            many_env = SyntheticEnv(30, num_envs=num_envs, device=args.device)
            few, few_seconds, _ = training_stepper("mappo", SyntheticEnv(3, num_envs=num_envs, device=args.device),
                                                   args.directory, count_work=True)
            many, many_seconds, many_agent = training_stepper("mappo", many_env, args.directory, count_work=True)
            few_step, many_step = interleaved(few, many, args.chunk, args.rounds)
            timed_steps = args.chunk * (args.rounds + 1)
            suffix = f"_{num_envs}_copies_{threads}_threads"
            print(f"synthetic env, {num_envs} copies, {threads} PyTorch thread(s):")
            for agents, step, seconds in ((3, few_step, few_seconds), (30, many_step, many_seconds)):
                update = seconds["update"] / timed_steps
                report(f"mappo_ms_per_step_{agents}_agents{suffix}", 1e3 * step,
                       f"  MAPPO per vectorized step, {agents:2d} agents:       {{:6.2f}} ms")
                report(f"mappo_collect_ms_per_step_{agents}_agents{suffix}", 1e3 * (step - update),
                       "    of which act + env + record + trainer:  {:6.2f} ms")
                report(f"mappo_update_ms_per_step_{agents}_agents{suffix}", 1e3 * update,
                       "    of which the update, amortised:         {:6.2f} ms")
                report(f"mappo_gflop_per_step_{agents}_agents{suffix}", seconds["flop_per_step"] / 1e9,
                       "    matrix-product work per step:           {:6.3f} GFLOP")
                report(f"mappo_gflop_per_s_{agents}_agents{suffix}", seconds["flop_per_step"] / 1e9 / step,
                       "    achieved over the whole step:           {:6.1f} GFLOP/s")
            report(f"scaling_30_over_3_agents{suffix}", many_step / few_step,
                   "  growth from 3 to 30 agents:           {:6.2f}x (bar <= 2)")
            rows = many_env.num_agents * num_envs * many_agent.cfg["rollouts"] // many_agent.cfg["mini_batches"]
            report(f"matmul_gflop_per_s{suffix}", matmul_rate(rows) / 1e9,
                   f"  ({rows}, 64) @ (64, 64) product alone:  {{:6.1f}} GFLOP/s (a 30-agent minibatch's hidden layer)")
    torch.set_num_threads(args.threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, default=0, help="env copies (default: each example's own)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=100, help="vectorized steps per timed chunk (a multiple of the"
                                                             " example's rollout length)")
    parser.add_argument("--rounds", type=int, default=12, help="alternating chunks per comparison")
    parser.add_argument("--threads", type=int, default=1, help="PyTorch intra-op threads")
    parser.add_argument("--device", default="cpu", help="where the agents' tensors live (cpu, cuda)")
    parser.add_argument("--scaling-copies", type=int, nargs="*", default=None,
                        help="env copies of the synthetic scaling runs (default: the MAPPO example's, or --num-envs)")
    parser.add_argument("--scaling-threads", type=int, nargs="*", default=None,
                        help="PyTorch thread counts of the synthetic scaling runs (default: --threads)")
    parser.add_argument("--skip-mpe", action="store_true", help="leave out the MPE figures")
    parser.add_argument("--skip-scaling", action="store_true", help="leave out the synthetic scaling figures")
    parser.add_argument("--skip-separate", action="store_true",
                        help="leave out the figures of per-agent (separate) models")
    parser.add_argument("--vmas-copies", type=int, nargs="*", default=[512, 4096],
                        help="copies of the VMAS balance runs (none: leave them out; needs vmas)")
    parser.add_argument("--quick", action="store_true", help="short timings, to check the script runs")
    parser.add_argument("--directory", default="/tmp/marlparts_throughput", help="experiment folder of the agents")
    parser.add_argument("--output", default=str(ROOT / "benchmarks/results/throughput.json"))
    args = parser.parse_args()
    if args.quick:
        args.rounds = 1
    torch.set_num_threads(args.threads)
    results = {"machine": platform.processor() or platform.machine(), "cores": os.cpu_count(), "device": args.device,
               "torch_threads": torch.get_num_threads(), "chunk": args.chunk, "rounds": args.rounds}

    def report(key, value, text):
        results[key] = value
        print(text.format(value), flush=True)

    if not args.skip_mpe:
        mpe_figures(args, report)
    if not args.skip_separate:
        separate_models_figures(args, report)
    if args.vmas_copies:
        vmas_reset_figures(args, report)
        vmas_figures(args, report)
    if not args.skip_scaling:
        scaling_figures(args, report)
    output = pathlib.Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2))
    print(f"written to {output}")


if __name__ == "__main__":
    main()
