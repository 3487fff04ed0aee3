"""Graph, DeepSets and MLP networks on VMAS navigation with many agents, at the same env steps, on several seeds;
then each trained agent evaluated, unchanged, with other numbers of agents.

    python benchmarks/agent_count_models.py --agents 6 --timesteps 1000000 --seeds 0 1 2 \\
        --eval-agents 4 8 --output benchmarks/results/agent_count_models.json

Each run builds ``examples/vmas/navigation_ippo.py``'s env and IPPO agent (``make_env(..., agents=)``,
``make_agent(..., model=)``), trains it for ``--timesteps`` env steps (all copies counted) and plays
``--episodes`` episodes with greedy actions and as many with sampled ones, on evaluation copies seeded apart from
training. The trained agent's checkpoint state then loads into the same example built for each of
``--eval-agents`` and plays as many greedy episodes there. Uniform random play is measured once per agent count.
Results (per model and seed; over the seeds: mean, min and max) go to ``--output`` after every run; a rerun
keeps the runs the file holds and runs only the missing ones.
"""

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from throughput import load_example  # noqa: E402

from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.trainers.opponents import random_team  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402

EXAMPLE = "examples/vmas/navigation_ippo.py"
QUIET = {"tensorboard": False, "csv": False, "checkpoint_interval": 0}


def mean_return(report: dict) -> float:
    """The mean over agents of the per-agent mean returns of an evaluation report."""
    return sum(report["returns"].values()) / len(report["returns"])


def build(example, args: argparse.Namespace, agents: int, model: str, seed: int, directory: str):
    """The example's env of ``agents`` agents, its agent with networks ``model``, and a quiet trainer."""
    env = example.make_env(num_envs=args.num_envs, seed=seed, agents=agents)
    agent = example.make_agent(env, directory, model=model, experiment={**QUIET, "directory": directory})
    return env, agent, SequentialTrainer(env=env, agents=agent, cfg={"disable_progressbar": True, "eval_actions": "both"})


def run(example, args: argparse.Namespace, model: str, seed: int, directory: str) -> dict:
    """Train one model kind on one seed; its evaluations on the training agent count and on the others."""
    set_seed(seed)
    env, agent, trainer = build(example, args, args.agents, model, seed, directory)
    trainer.cfg["timesteps"] = args.timesteps // env.num_envs
    began = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - began
    report = trainer.eval(args.episodes)
    result = {"env_steps": trainer.cfg["timesteps"] * env.num_envs, "training_seconds": round(seconds, 1),
              "mean_return": mean_return(report["greedy"]), "sampled_mean_return": mean_return(report["sampled"]),
              "other_agent_counts": {}}
    state = agent.state_dict(include_memory=False)
    env.close()
    for agents in args.eval_agents:
        other_env, other_agent, other_trainer = build(example, args, agents, model, seed, directory)
        other_agent.load_state_dict(state)
        other_report = other_trainer.eval(args.episodes)
        result["other_agent_counts"][str(agents)] = mean_return(other_report["greedy"])
        other_env.close()
    return result


def random_play(example, args: argparse.Namespace, agents: int, directory: str) -> float:
    """The mean return of uniform random actions with ``agents`` agents."""
    env, _, trainer = build(example, args, agents, "mlp", 0, directory)
    value = mean_return(trainer.eval(args.episodes, opponents=random_team(env.possible_agents)))
    env.close()
    return value


def summary(values: list) -> dict:
    """Mean, min and max of ``values`` and how many there are."""
    return {"mean": statistics.mean(values), "min": min(values), "max": max(values), "seeds": len(values)}


def main() -> None:
    """Run the missing runs and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["mlp", "gnn", "deepsets"])
    parser.add_argument("--agents", type=int, default=6, help="agents a copy during training")
    parser.add_argument("--eval-agents", type=int, nargs="*", default=[4, 8], help="other agent counts to evaluate on")
    parser.add_argument("--timesteps", type=int, default=1_000_000, help="env steps of training (all copies counted)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument("--num-envs", type=int, default=512)
    parser.add_argument("--output", required=True, help="the JSON results file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    example = load_example(EXAMPLE)
    output = pathlib.Path(args.output)
    settings = {"example": EXAMPLE, "agents": args.agents, "eval_agents": sorted(args.eval_agents),
                "timesteps": args.timesteps, "episodes": args.episodes, "num_envs": args.num_envs}
    report = {**settings, "random": {}, "runs": {}, "summary": {}}
    if output.exists():
        earlier = json.loads(output.read_text())
        if {key: earlier.get(key) for key in settings} != settings:
            raise SystemExit(f"{output} holds runs of other settings: give another --output")
        report.update(random=earlier["random"], runs=earlier["runs"])

    def write() -> None:
        report["summary"] = {}
        for model, seeds in report["runs"].items():
            runs = list(seeds.values())
            report["summary"][model] = {
                "greedy": summary([run["mean_return"] for run in runs]),
                "sampled": summary([run["sampled_mean_return"] for run in runs]),
                **{f"greedy_with_{agents}_agents": summary([run["other_agent_counts"][agents] for run in runs])
                   for agents in runs[0]["other_agent_counts"]}}
        output.write_text(json.dumps(report, indent=1))

    with tempfile.TemporaryDirectory() as directory:
        for agents in [args.agents, *args.eval_agents]:
            if str(agents) not in report["random"]:
                report["random"][str(agents)] = random_play(example, args, agents, directory)
                write()
        for seed in args.seeds:  # every model on a seed before the next seed: a stopped run compares like with like
            for model in args.models:
                if str(seed) in report["runs"].get(model, {}):
                    continue
                result = run(example, args, model, seed, directory)
                report["runs"].setdefault(model, {})[str(seed)] = result
                write()
                print(json.dumps({"model": model, "seed": seed, **result}), flush=True)
    print(json.dumps({"random": report["random"], "summary": report["summary"]}, indent=1))


if __name__ == "__main__":
    main()
