"""Whether ``torch.compile`` pays for an example's training on this machine (the VMAS balance example by default).

    python benchmarks/compile_check.py            # about 3 minutes; --rounds, --copies
    python benchmarks/compile_check.py --example examples/mpe/simple_spread_mappo.py \
        --output benchmarks/results/compile_check_mpe.json

By default, the VMAS balance example's MAPPO (its own ``make_env`` / ``make_agent``: 512 copies, rollouts
of 32, 2 epochs of 2 minibatches, 64-64 MLPs; with ``--example``, that example's own settings) trains in
chunks of one rollout each (acting, stepping, storing, the update). Each compiled version below runs in a
process of its own (compiled graphs and their guards are not shared), alternated chunk by chunk
(A B B A ...) with the models as the example builds them (``eager``), on the same parameters:

- ``compiled``: each model's MLP replaced by ``torch.compile`` of it (the library's activation as it is);
- ``compiled, torch.tanh``: the same with ``torch.nn.Tanh`` in place of the library's ``Tanh`` (which computes
  tanh as ``2σ(2x) − 1`` on the CPU, a custom autograd function), so that the compiler sees tanh itself;
- ``compiled, torch.tanh, static shapes``: the same with ``dynamic=False``, one graph specialised for each
  batch size (acting's rows, the minibatches' rows), where the default turns to one graph for any size once
  a second size comes.

The compile time is what the first chunk of a compiled version costs beyond an eager chunk (acting and the
update each compile their own graphs), with an empty compiler cache. From the rates and the compile time the
script prints the env steps a run needs before compiling pays, beside the example's default budget. Results go to
``benchmarks/results/compile_check.json``. Run it with nothing else running; figures from different runs are
not comparable on a VM whose speed drifts.
"""

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

import torch
from torch import nn

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from throughput import load_example  # noqa: E402

from marlparts.models.activations import Tanh  # noqa: E402
from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402


def with_torch_tanh(net: nn.Sequential) -> nn.Sequential:
    """The same layers (shared, not copied) with ``torch.nn.Tanh`` in place of the library's ``Tanh``."""
    return nn.Sequential(*[nn.Tanh() if isinstance(layer, Tanh) else layer for layer in net])


VMAS_EXAMPLE = "examples/vmas/balance_mappo.py"
COMPILED_VERSIONS = {  # name: (with torch.nn.Tanh in place of the library's Tanh, torch.compile's dynamic)
    "compiled": (False, None),
    "compiled, torch.tanh": (True, None),
    "compiled, torch.tanh, static shapes": (True, False),
}


def time_versions(compiled_name: str, example_path: str, copies: Optional[int], rounds: int,
                  device: str) -> Dict[str, object]:
    """Train the example's agent in alternated chunks of one rollout, eager and ``compiled_name``; the figures."""
    example = load_example(example_path)
    placement = {} if device == "cpu" else {"device": device}  # not every example's make_env takes a device
    env = example.make_env(example.NUM_ENVS if copies is None else copies, seed=0, **placement)
    set_seed(0)
    directory = tempfile.mkdtemp(prefix="compile_check_")
    agent = example.make_agent(env, directory, experiment={"tensorboard": False, "csv": False,
                                                           "checkpoint_interval": 0, "directory": directory})
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"disable_progressbar": True})
    rollout = agent.cfg["rollouts"]
    models = {id(model): model for uid in env.possible_agents for model in agent.models[uid].values()}
    eager_nets = {key: model.net for key, model in models.items()}
    plain_tanh, dynamic = COMPILED_VERSIONS[compiled_name]
    versions = {"eager": eager_nets,
                compiled_name: {key: torch.compile(with_torch_tanh(net) if plain_tanh else net, dynamic=dynamic)
                                for key, net in eager_nets.items()}}

    def chunk(name: str) -> float:
        """Seconds of one rollout's training (acting, stepping, storing, the update) with version ``name``."""
        for key, model in models.items():
            model.net = versions[name][key]
        trainer.cfg["timesteps"] = rollout
        synchronize()
        start = time.perf_counter()
        trainer.train()
        synchronize()
        return time.perf_counter() - start

    def synchronize() -> None:
        """Wait for the GPU's queued work (nothing to wait for on the CPU)."""
        if env.device.type == "cuda":
            torch.cuda.synchronize(env.device)

    chunk("eager")  # the first update's one-time costs (memory, optimizer state) out of the figures
    first = {name: chunk(name) for name in versions}  # the compiled version compiles its graphs here
    seconds: Dict[str, List[float]] = {name: [] for name in versions}
    names = list(versions)
    for round_index in range(rounds):
        for name in names if round_index % 2 == 0 else reversed(names):
            seconds[name].append(chunk(name))
    env_steps = rollout * env.num_envs
    eager, compiled = statistics.median(seconds["eager"]), statistics.median(seconds[compiled_name])
    compile_seconds = first[compiled_name] - first["eager"]
    saved_per_step = (eager - compiled) / env_steps
    return {"rollout_env_steps": env_steps, "seconds_per_rollout": seconds, "first_chunk_seconds": first,
            "eager_env_steps_per_s": env_steps / eager, "compiled_env_steps_per_s": env_steps / compiled,
            "speed_against_eager": eager / compiled, "compile_seconds": compile_seconds,
            "break_even_env_steps": compile_seconds / saved_per_step if saved_per_step > 0 else None,
            "example_default_env_steps": example.TIMESTEPS}


def main() -> None:
    """Time each compiled version against eager (each in a process of its own) and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", default=VMAS_EXAMPLE, help="the example script whose training is timed")
    parser.add_argument("--copies", type=int, default=None, help="env copies (default: the example's own)")
    parser.add_argument("--rounds", type=int, default=8, help="alternated rounds of one rollout per version")
    parser.add_argument("--threads", type=int, default=1, help="PyTorch intra-op threads")
    parser.add_argument("--device", default="cpu", help="the env copies' and the agent's device (cpu, cuda)")
    parser.add_argument("--version", choices=sorted(COMPILED_VERSIONS), help="only this compiled version, in this "
                        "process (by default each runs in a process of its own)")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "compile_check.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.version is not None:  # one version here; the JSON of its figures on the last line
        print(json.dumps(time_versions(args.version, args.example, args.copies, args.rounds, args.device)))
        return
    report = {"example": args.example, "copies": args.copies, "device": args.device, "rounds": args.rounds,
              "threads": args.threads, "torch": torch.__version__,
              "machine": platform.processor() or platform.machine(), "versions": {}}
    copies = "its own" if args.copies is None else args.copies
    print(f"{args.example}, {copies} copies, one rollout per chunk, {args.rounds} alternated rounds "
          f"against eager in each version's own process, {args.threads} thread(s)")
    for name in COMPILED_VERSIONS:
        command = [sys.executable, __file__, "--version", name, "--example", args.example,
                   "--rounds", str(args.rounds), "--threads", str(args.threads), "--device", args.device]
        command += [] if args.copies is None else ["--copies", str(args.copies)]
        environment = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="compile_check_cache_")}
        output = subprocess.run(command, check=True, capture_output=True, text=True, env=environment).stdout
        figures = json.loads(output.strip().splitlines()[-1])
        report["versions"][name] = figures
        line = (f"{name:36s} {figures['compiled_env_steps_per_s']:8.0f} env steps/s against eager "
                f"{figures['eager_env_steps_per_s']:8.0f} ({figures['speed_against_eager']:.3f}x), "
                f"compiling took {figures['compile_seconds']:.1f} s")
        breakeven = figures["break_even_env_steps"]
        print(line + (f": pays after {breakeven / 1e6:.1f}M env steps" if breakeven else ": never pays"))
    print(f"(the example trains {figures['example_default_env_steps'] / 1e6:.0f}M env steps by default)")
    pathlib.Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
