"""A training workload timed on this checkout and on an earlier commit, alternately.

    python benchmarks/against_commit.py --workload same_work --commit 49fc192 --rounds 5 \\
        --output benchmarks/results/same_work_against_commit.json
    python benchmarks/against_commit.py --workload mappo_example --commit 49fc192 --rounds 5 \\
        --output benchmarks/results/mappo_example_against_commit.json
    python benchmarks/against_commit.py --workload example --example examples/mpe/simple_speaker_listener_happo.py \\
        --commit <commit> --rounds 5 --output <file>

Five workloads:

- ``same_work``: the configuration of a library that steps one env copy: simple_spread (3 agents,
  discrete actions), each agent its own policy and critic (no sharing), rollouts of 125 steps, 10
  epochs of 4 minibatches. Each process also times env-only stepping of one copy beside its
  training, so every rate comes with its ratio to env-only.
- ``mappo_example``: each version's own ``examples/mpe/simple_spread_mappo.py`` (64 copies, shared
  policy, centralised critic) for ``--example-steps`` env steps; the rate is the one it prints.
- ``example``: the same with each version's own copy of the example script ``--example``.
- ``example_env_only``: env-only stepping (uniform random actions) of the env that each version's own
  ``--example`` builds (its ``make_env()`` with its default copies) for ``--example-steps`` env steps,
  after one warm-up step: the cost of the env wrappers alone.
- ``example_update``: the update alone of the agent that each version's own ``--example`` builds (its
  ``make_env()`` and ``make_agent(env, directory)``): one rollout is collected and updated on (the
  warm-up), then ``--updates`` more updates run on that stored rollout, timed; the rate is updates per
  second.

With ``--phases`` (``same_work``), each process also says where the time of a training step goes, in
microseconds per env step: acting, env stepping, storing, and the update, with its losses, backward
passes, gradient zeroing and clipping, and optimizer steps (timed with ``perf_counter`` around each, in
the timed chunks only).

Speeds drift on a shared machine, so the two versions are timed in alternating rounds, each round a
fresh process per version (the earlier commit is checked out into a temporary git worktree and put
first on ``PYTHONPATH``). With ``--simultaneous`` the two processes of a round run at the same time,
each pinned to a core of its own (the cores swapped every round), so that a drift of the machine's
speed falls on both alike; this needs two otherwise idle cores. The figures (per round and medians)
go to ``--output``.
"""

import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Optional

ROOT = pathlib.Path(__file__).resolve().parent.parent
TRAINED = re.compile(r"trained (\d+) env steps(?: on \d+ rank\(s\))? in ([\d.]+) s")
MAPPO_EXAMPLE = "examples/mpe/simple_spread_mappo.py"


def time_phases(agent, env, times: dict) -> None:
    """Add the seconds spent in each phase of training to ``times`` from now on (methods wrapped in place)."""
    import functools

    import torch

    def wrap(owner, name, phase):
        original = getattr(owner, name)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            began = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                times[phase] = times.get(phase, 0.0) + time.perf_counter() - began
        setattr(owner, name, timed)

    for name, phase in (("act", "act"), ("record_transition", "record"), ("update", "update"), ("group_losses", "losses")):
        wrap(agent, name, phase)
    wrap(env, "step", "env_step")
    for record in agent.trained:
        wrap(record.optimizer, "step", "optimizer_step")
        wrap(record, "clip_gradients", "clip")
        wrap(record, "zero_gradients", "zero")
    wrap(torch.Tensor, "backward", "backward")


def measure(chunks: int, chunk_steps: int, phases: bool = False) -> dict:
    """Train the configuration in this process (whichever ``marlparts`` is imported) and time it in
    ``chunks`` chunks of ``chunk_steps`` env steps, alternating with as many env-only steps; with
    ``phases``, also the microseconds per env step of each phase of training."""
    import torch
    from mpe2 import simple_spread_v3

    from marlparts.agents import MAPPO, MAPPO_DEFAULT_CONFIG
    from marlparts.envs import wrap_env
    from marlparts.memories import RandomMemory
    from marlparts.models import CategoricalMixin, DeterministicMixin, Model, mlp
    from marlparts.trainers import SequentialTrainer
    from marlparts.utils import set_seed

    torch.set_num_threads(1)

    class Policy(CategoricalMixin, Model):
        """An MLP from the observation to action logits."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(64, 64), output_gain=0.01)

        def compute(self, inputs, role=""):
            return self.net(inputs["observations"]), {}

    class Value(DeterministicMixin, Model):
        """An MLP from the global state to one value."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.net = mlp(self.num_observations, 1, hidden_sizes=(64, 64), activation=torch.nn.Tanh)

        def compute(self, inputs, role=""):
            return self.net(inputs["observations"]), {}

    def make_env(seed):
        return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25, local_ratio=0.5),
                        num_envs=1, seed=seed, state_source="observations")

    set_seed(0)
    env = make_env(0)
    models = {uid: {"policy": Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid)),
                    "value": Value(observation_space=env.state_space)} for uid in env.possible_agents}
    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg.update(rollouts=125, learning_epochs=10, mini_batches=4, agent_specific_values="none")
    directory = tempfile.mkdtemp()
    cfg["experiment"].update(directory=directory, tensorboard=False, csv=False, checkpoint_interval=0)
    agent = MAPPO(possible_agents=env.possible_agents, models=models,
                  memories={uid: RandomMemory(memory_size=125, num_envs=1) for uid in env.possible_agents},
                  observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                  state_spaces=env.state_spaces, cfg=cfg)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": chunk_steps, "disable_progressbar": True})
    trainer.train()  # warm-up: the first rollouts and updates

    other = make_env(1)
    other.reset()
    generator = torch.Generator().manual_seed(0)

    def env_only(steps):
        for _ in range(steps):
            other.step({uid: torch.randint(0, int(other.action_space(uid).n), (1, 1), generator=generator)
                        for uid in other.possible_agents})

    times: dict = {}
    if phases:
        time_phases(agent, env, times)
    training_s = env_s = 0.0
    for _ in range(chunks):
        began = time.perf_counter()
        trainer.train()
        training_s += time.perf_counter() - began
        began = time.perf_counter()
        env_only(chunk_steps)
        env_s += time.perf_counter() - began
    steps = chunks * chunk_steps
    return {"training_steps_per_s": steps / training_s, "env_only_steps_per_s": steps / env_s,
            "training_over_env_only": env_s / training_s,
            **{f"us_per_step_{phase}": seconds / steps * 1e6 for phase, seconds in sorted(times.items())}}


def measure_env_only(example: str, steps: int) -> dict:
    """Step the env that ``example``'s ``make_env()`` builds (this version's copy of the script) with uniform
    random actions for ``steps`` env steps (all copies counted): its env-only rate."""
    import importlib.util

    import gymnasium
    import torch

    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("example", example)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    env = module.make_env()
    env.reset()
    generator = torch.Generator().manual_seed(0)

    def random_action(space: gymnasium.Space) -> torch.Tensor:
        if isinstance(space, gymnasium.spaces.Discrete):
            return int(space.start) + torch.randint(0, int(space.n), (env.num_envs, 1), generator=generator)
        if not isinstance(space, gymnasium.spaces.Box):
            raise SystemExit(f"example_env_only draws random actions of Discrete and Box spaces, not {space}")
        low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        return low + (high - low) * torch.rand(env.num_envs, *space.shape, generator=generator)

    def step() -> None:
        env.step({uid: random_action(env.action_space(uid)).to(env.device) for uid in env.possible_agents})

    step()  # warm-up
    vectorized = max(1, steps // env.num_envs)
    began = time.perf_counter()
    for _ in range(vectorized):
        step()
    seconds = time.perf_counter() - began
    env.close()
    return {"env_only_steps_per_s": vectorized * env.num_envs / seconds}


def measure_update(example: str, updates: int) -> dict:
    """Build ``example``'s agent on its env (this version's copy of the script), collect one rollout (and run its
    update, the warm-up), then time ``updates`` updates on that stored rollout: the updates per second."""
    import importlib.util

    import torch

    from marlparts.trainers import SequentialTrainer
    from marlparts.utils import set_seed

    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("example", example)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    set_seed(0)
    env = module.make_env()
    with tempfile.TemporaryDirectory() as directory:
        agent = module.make_agent(env, directory)
        rollout = agent.cfg["rollouts"]
        SequentialTrainer(env=env, agents=agent, cfg={"timesteps": rollout, "disable_progressbar": True}).train()
        began = time.perf_counter()
        for _ in range(updates):
            agent.update(rollout - 1, rollout)
        seconds = time.perf_counter() - began
    env.close()
    return {"updates_per_s": updates / seconds}


def rate_key(args: argparse.Namespace) -> str:
    """The figure the two versions are compared by."""
    return {"example_env_only": "env_only_steps_per_s", "example_update": "updates_per_s"}.get(
        args.workload, "training_steps_per_s")


def example_script(args: argparse.Namespace) -> str:
    """The example script an example workload runs (each version's own copy of it)."""
    return args.example if args.workload in ("example", "example_env_only", "example_update") else MAPPO_EXAMPLE


def start_version(source: pathlib.Path, args: argparse.Namespace, directory: str, core: Optional[int] = None):
    """Start one measuring process with ``source``'s ``marlparts`` first on the path (pinned to ``core``)."""
    env = {**os.environ, "PYTHONPATH": str(source), "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    if args.workload in ("mappo_example", "example"):
        command = [sys.executable, example_script(args), "--timesteps", str(args.example_steps), "--episodes", "4",
                   "--directory", directory]
    elif args.workload == "example_env_only":
        command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--measure-env-only", example_script(args),
                   "--example-steps", str(args.example_steps)]
    elif args.workload == "example_update":
        command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--measure-update", example_script(args),
                   "--updates", str(args.updates)]
    else:
        command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--measure", "--chunks", str(args.chunks),
                   "--chunk-steps", str(args.chunk_steps)] + (["--phases"] if args.phases else [])
    pin = None if core is None else (lambda: os.sched_setaffinity(0, {core}))
    return subprocess.Popen(command, env=env, cwd=source, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=pin)


def finish_version(process: subprocess.Popen, args: argparse.Namespace) -> dict:
    """The figures a measuring process printed."""
    output, errors = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"a measuring process failed:\n{errors[-3000:]}")
    if args.workload in ("mappo_example", "example"):
        steps, seconds = TRAINED.search(output).groups()
        return {"training_steps_per_s": int(steps) / float(seconds)}
    return json.loads(output.strip().splitlines()[-1])


def run_round(earlier: pathlib.Path, round_index: int, args: argparse.Namespace) -> dict:
    """Both versions once: one after the other, or at the same time on two cores (swapped every round)."""
    with tempfile.TemporaryDirectory() as first, tempfile.TemporaryDirectory() as second:
        if not args.simultaneous:
            return {"earlier": finish_version(start_version(earlier, args, first), args),
                    "now": finish_version(start_version(ROOT, args, second), args)}
        cores = sorted(os.sched_getaffinity(0))[:2]
        if round_index % 2:
            cores.reverse()
        processes = {"earlier": start_version(earlier, args, first, cores[0]),
                     "now": start_version(ROOT, args, second, cores[1])}
        return {version: {**finish_version(process, args), "core": cores[index]}
                for index, (version, process) in enumerate(processes.items())}


def main() -> None:
    """Alternate the two versions for ``--rounds`` rounds and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commit", help="the earlier commit to time against this checkout")
    parser.add_argument("--workload", choices=["same_work", "mappo_example", "example", "example_env_only",
                                               "example_update"],
                        default="same_work")
    parser.add_argument("--example", default=MAPPO_EXAMPLE, help="the example script of the 'example' workload")
    parser.add_argument("--example-steps", type=int, default=64000, help="env steps of each run of the example")
    parser.add_argument("--updates", type=int, default=20, help="timed updates of each example_update process")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=4, help="timed chunks per process")
    parser.add_argument("--chunk-steps", type=int, default=500, help="env steps per chunk (whole rollouts of 125)")
    parser.add_argument("--simultaneous", action="store_true",
                        help="run the two versions of a round at the same time, each on a core of its own")
    parser.add_argument("--phases", action="store_true", help="same_work: time each phase of training too")
    parser.add_argument("--output", help="the JSON results file")
    parser.add_argument("--measure", action="store_true", help="(internal) measure the version on the path")
    parser.add_argument("--measure-env-only", metavar="EXAMPLE", help="(internal) env-only rate of EXAMPLE's env")
    parser.add_argument("--measure-update", metavar="EXAMPLE", help="(internal) update rate of EXAMPLE's agent")
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.chunks, args.chunk_steps, args.phases)))
        return
    if args.measure_env_only:
        print(json.dumps(measure_env_only(args.measure_env_only, args.example_steps)))
        return
    if args.measure_update:
        print(json.dumps(measure_update(args.measure_update, args.updates)))
        return
    if not args.commit or not args.output:
        parser.error("--commit and --output are needed")
    if args.simultaneous and len(os.sched_getaffinity(0)) < 2:
        parser.error("--simultaneous needs two cores")
    def git(*arguments: str) -> str:
        return subprocess.run(["git", *arguments], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    report = {"commit": git("rev-parse", "--short", args.commit), "checkout": git("rev-parse", "--short", "HEAD"),
              "checkout_has_uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no")),
              "workload": args.workload,
              "config": ("simple_spread N=3, 1 copy, per-agent policy and critic, rollouts 125, 10 epochs x 4 minibatches"
                         if args.workload == "same_work" else
                         f"{example_script(args)} of each version, {args.updates} updates on one rollout"
                         if args.workload == "example_update" else
                         f"{example_script(args)} of each version, {args.example_steps} env steps"),
              "simultaneous": args.simultaneous, "rounds": []}
    with tempfile.TemporaryDirectory() as folder:
        earlier = pathlib.Path(folder) / "earlier"
        subprocess.run(["git", "worktree", "add", "--detach", str(earlier), args.commit], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            for round_index in range(args.rounds):
                row = run_round(earlier, round_index, args)
                report["rounds"].append(row)
                print(json.dumps({"round": round_index, **row}), flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(earlier)], cwd=ROOT, capture_output=True)
    summary = {}
    for version in ("earlier", "now"):
        for key in (key for key in report["rounds"][0][version] if key != "core"):
            summary[f"{version}_{key}"] = statistics.median(row[version][key] for row in report["rounds"])
    key = rate_key(args)
    summary["now_over_earlier"] = statistics.median(row["now"][key] / row["earlier"][key] for row in report["rounds"])
    report["median"] = summary
    pathlib.Path(args.output).write_text(json.dumps(report, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
