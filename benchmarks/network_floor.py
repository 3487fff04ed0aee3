"""How close an example's training could come to env-only stepping if all its work but the networks' passes
were free.

    python benchmarks/network_floor.py --example examples/vmas/balance_mappo.py \\
        --output benchmarks/results/network_floor_vmas.json
    python benchmarks/network_floor.py --example examples/mpe/simple_spread_mappo.py --chunk 50 \\
        --output benchmarks/results/network_floor_mpe.json

The example's ``make_env()`` and ``make_agent(env, directory)`` build its env and agent. Every call of the
agent's models' ``compute`` (their networks, from the preprocessed inputs to the outputs) is recorded with
its inputs during one rollout and its update: the forward passes of acting, of the rollout's values and of
the minibatches, and which of them ran with gradients. Then three workloads are timed in alternating
chunks of one rollout each, on one PyTorch thread:

- training: the example's trainer, acting, stepping, storing and updating;
- env-only: a second copy of the env stepped with uniform random actions;
- the networks alone: the recorded calls replayed on their recorded inputs, each call with gradients
  followed by the backward pass of its outputs' sum (the gradients an update computes, parameter by
  parameter), the gradients set to None before each.

``env / (env + networks)`` is the most that training can reach as a fraction of env-only speed while
the env and the networks share one thread and everything else (sampling, distributions, losses, the
optimizer, scalers, storing, the trainer and Python) costs nothing. It is tighter than the bound
``throughput.py`` computes from the matrix products alone: the networks' elementwise work (biases,
activations and their derivatives) is in it. The replay is a floor of the networks' cost, not an
estimate of it: each backward pass follows its own forward pass while its activations are fresh.
"""

import argparse
import json
import pathlib
import sys
import tempfile
from typing import Any, Callable, Dict, List, Tuple

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from throughput import env_stepper, interleaved_many, load_example  # noqa: E402

from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402

Call = Tuple[torch.nn.Module, Dict[str, Any], str, bool]  # model, inputs, role, with gradients


def unique_models(agent: Any) -> List[torch.nn.Module]:
    """The agent's models, each once (a model shared by several agents or roles counts once)."""
    seen: Dict[int, torch.nn.Module] = {}
    for roles in agent.models.values():
        for model in roles.values():
            seen.setdefault(id(model), model)
    return list(seen.values())


def record_calls(models: List[torch.nn.Module], calls: List[Call]) -> Callable[[], None]:
    """Record every ``compute`` call of ``models`` into ``calls`` (inputs detached and copied); return the
    function that stops recording.
    """
    originals = []
    for model in models:
        original = model.compute

        def compute(inputs, role="", _model=model, _original=original):
            kept = {key: value.detach().clone() if isinstance(value, torch.Tensor) else value
                    for key, value in inputs.items()}
            calls.append((_model, kept, role, torch.is_grad_enabled()))
            return _original(inputs, role)
        model.compute = compute
        originals.append((model, original))

    def stop() -> None:
        for model, original in originals:
            model.compute = original
    return stop


def replayer(calls: List[Call]) -> Callable[[int], None]:
    """A function that replays the calls of ``n`` rollouts' worth (the recorded calls cover one rollout)."""
    def replay(n: int) -> None:
        for _ in range(n):
            for model, inputs, role, with_gradients in calls:
                if with_gradients:
                    for parameter in model.parameters():
                        parameter.grad = None
                    output, _ = model.compute(inputs, role)
                    output.float().sum().backward()
                else:
                    with torch.no_grad():
                        model.compute(inputs, role)
    return replay


def example_trainer(example: Any) -> Tuple[Any, Any, SequentialTrainer, int]:
    """The example's env (seed 0) and agent (seeds set to 0, its folder a temporary one, no logs or checkpoints),
    a trainer that trains it one rollout per ``train()``, and the rollout's length in vectorized steps.
    """
    set_seed(0)
    env = example.make_env()
    agent = example.make_agent(env, tempfile.mkdtemp())
    agent.cfg["experiment"].update(tensorboard=False, checkpoint_interval=0)
    rollout = int(agent.cfg["rollouts"])
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": rollout, "disable_progressbar": True})
    return env, agent, trainer, rollout


def main() -> None:
    """Measure, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", default="examples/vmas/balance_mappo.py")
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds of the three workloads")
    parser.add_argument("--chunk", type=int, default=1, help="rollouts per timed chunk")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "network_floor.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    example = load_example(args.example)
    env, agent, trainer, rollout = example_trainer(example)
    trainer.train()  # the first rollout and update: warm-up

    calls: List[Call] = []
    stop = record_calls(unique_models(agent), calls)
    trainer.train()  # one rollout and its update, recorded
    stop()
    if not calls:
        raise SystemExit(f"{args.example}: no call of the agent's models' compute was recorded")

    def train(n: int) -> None:
        trainer.cfg["timesteps"] = n * rollout
        trainer.train()

    env_only = example.make_env(seed=1)
    step_env_only = env_stepper(env_only)  # uniform random actions

    def step_env(n: int) -> None:
        step_env_only(n * rollout)

    train_s, env_s, networks_s = interleaved_many([train, step_env, replayer(calls)], args.chunk, args.rounds)
    env_steps = rollout * env.num_envs
    report = {
        "example": args.example, "torch_threads": 1, "rounds": args.rounds, "env_steps_per_rollout": env_steps,
        "recorded_calls": len(calls), "calls_with_gradients": sum(call[3] for call in calls),
        "training_steps_per_s": env_steps / train_s, "env_only_steps_per_s": env_steps / env_s,
        "training_over_env_only": env_s / train_s,
        "ms_per_rollout": {"training": 1000 * train_s, "env_only": 1000 * env_s, "networks_alone": 1000 * networks_s},
        "ceiling_with_only_env_and_networks": env_s / (env_s + networks_s),
    }
    print(f"{args.example}: {len(calls)} network calls per rollout ({report['calls_with_gradients']} with gradients)")
    print(f"  training:        {report['training_steps_per_s']:8.0f} env steps/s ({1000 * train_s:.0f} ms a rollout)")
    print(f"  env-only:        {report['env_only_steps_per_s']:8.0f} env steps/s ({1000 * env_s:.0f} ms a rollout)")
    print(f"  networks alone:  {1000 * networks_s:.0f} ms a rollout")
    print(f"  training / env-only:                     {report['training_over_env_only']:.1%}")
    print(f"  env / (env + networks), the ceiling:     {report['ceiling_with_only_env_and_networks']:.1%}")
    pathlib.Path(args.output).write_text(json.dumps(report, indent=1) + "\n")
    env.close()
    env_only.close()


if __name__ == "__main__":
    main()
