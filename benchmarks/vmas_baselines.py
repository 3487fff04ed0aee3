"""Baselines of the VMAS examples' tasks: the mean episode return of random actions and of VMAS's own
``HeuristicPolicy`` (balance; navigation's needs cvxpy and continuous actions), on the examples' env settings
and evaluation copies.

    python benchmarks/vmas_baselines.py            # 512 episodes per policy

Each policy runs ``--episodes`` whole episodes (one per copy, all started together) through the wrapper, as the
trainer's evaluation does; the figure is the mean over episodes and agents of the episode return. Results go to
benchmarks/results/vmas_baselines.json.
"""

import argparse
import importlib
import json
import pathlib
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from throughput import load_example  # noqa: E402

from marlparts.trainers.evaluation import collect_episodes  # noqa: E402


def random_policy(env, generator):
    """Uniform random actions over each agent's space."""
    def act(observations, states, infos):
        actions = {}
        for uid in env.possible_agents:
            space = env.action_space(uid)
            if hasattr(space, "n"):
                actions[uid] = torch.randint(0, int(space.n), (env.num_envs, 1), generator=generator)
            else:
                low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
                actions[uid] = low + torch.rand(env.num_envs, *space.shape, generator=generator) * (high - low)
        return actions
    return act


def heuristic_policy(env, scenario: str):
    """VMAS's ``HeuristicPolicy`` of ``scenario``, fed each agent's observation as VMAS returns it."""
    continuous = not hasattr(env.action_space(env.possible_agents[0]), "n")
    policy = importlib.import_module(f"vmas.scenarios.{scenario}").HeuristicPolicy(continuous_action=continuous)

    def act(observations, states, infos):
        actions = {}
        for uid, agent in zip(env.possible_agents, env.env.agents):
            action = policy.compute_action(observations[uid], u_range=agent.u_range)
            actions[uid] = action if continuous else action.reshape(-1, 1).long()
        return actions
    return act


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument("--output", default=str(ROOT / "benchmarks/results/vmas_baselines.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {"episodes": args.episodes}
    # navigation's heuristic solves a QP with cvxpy and takes continuous actions: random actions only there
    for example, scenario, heuristic in (("balance_mappo", "balance", True), ("navigation_ippo", "navigation", False)):
        module = load_example(f"examples/vmas/{example}.py")
        env = module.make_env(args.episodes, seed=0).make_evaluation_env(args.episodes)
        policies = {"random": random_policy(env, torch.Generator().manual_seed(0))}
        if heuristic:
            policies["heuristic"] = heuristic_policy(env, scenario)
        for name, act in policies.items():
            episodes = collect_episodes(env, act, args.episodes, seed=env.seed)
            value = float(episodes.returns.mean())
            results[f"{scenario}_{name}_mean_return"] = value
            print(f"{scenario}, {name}: mean episode return {value:.2f} over {episodes.returns.shape[0]} episodes",
                  flush=True)
    output = pathlib.Path(args.output)
    output.write_text(json.dumps(results, indent=2))
    print(f"written to {output}")


if __name__ == "__main__":
    main()
