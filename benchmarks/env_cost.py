"""Env cost: what one env step costs through ``wrap_env`` for each env family with an example.

    python benchmarks/env_cost.py             # about a minute
    python benchmarks/env_cost.py --steps 50  # smoke run

Each env is wrapped with 16 copies in this process and stepped with uniformly random actions (a
joint step of one copy = one env step); the figure is microseconds per env step and env steps per
second, which bound any training rate on that env from above. Envs whose package is missing are
skipped. Run it on an otherwise idle machine: this machine's speed drifts by tens of percent from
minute to minute, so read the figures as orders of magnitude, not as ratios. Results go to
benchmarks/results/env_cost.json.
"""

import argparse
import importlib.util
import json
import pathlib
import time

import torch

from marlparts.envs import wrap_env

ROOT = pathlib.Path(__file__).resolve().parent.parent
NUM_ENVS = 16


def _mpe(name):
    def factory():
        from mpe2 import simple_spread_v3, simple_tag_v3
        return {"simple_spread_v3": simple_spread_v3, "simple_tag_v3": simple_tag_v3}[name].parallel_env()
    return factory


def _gymnasium(package, name):
    def factory():
        import gymnasium
        __import__(package)
        return gymnasium.make(name, disable_env_checker=True)
    return factory


def _kaz():
    from pettingzoo.butterfly import knights_archers_zombies_v11
    return knights_archers_zombies_v11.parallel_env(max_cycles=300)


def _tictactoe():
    from pettingzoo.classic import tictactoe_v3
    return tictactoe_v3.env()


ENVS = {  # name: (package that must be installed, factory of one copy)
    "MPE simple_spread_v3 (3 agents)": ("mpe2", _mpe("simple_spread_v3")),
    "MPE simple_tag_v3 (4 agents)": ("mpe2", _mpe("simple_tag_v3")),
    "LBF Foraging-8x8-2p-2f-coop-v3": ("lbforaging", _gymnasium("lbforaging", "Foraging-8x8-2p-2f-coop-v3")),
    "LBF Foraging-10x10-3p-3f-v3": ("lbforaging", _gymnasium("lbforaging", "Foraging-10x10-3p-3f-v3")),
    "RWARE rware-tiny-2ag-v2": ("rware", _gymnasium("rware", "rware-tiny-2ag-v2")),
    "PettingZoo knights_archers_zombies_v11": ("pygame", _kaz),
    "PettingZoo tictactoe_v3 (one move per step)": ("pettingzoo", _tictactoe),
}


def random_actions(env, generator):
    """One uniformly random action per agent and copy (legal ones where the env has masks)."""
    actions = {}
    for uid, space in env.action_spaces.items():
        actions[uid] = torch.randint(0, int(space.n), (env.num_envs, 1), generator=generator)
    return actions


def masked_random_actions(env, infos, generator):
    """Random legal actions from ``infos["action_mask"]``."""
    masks = infos["action_mask"]
    return {uid: torch.multinomial(masks[uid].float(), 1, generator=generator) for uid in env.possible_agents}


def measure(factory, steps: int) -> dict:
    """Microseconds per env step (one copy's joint step) with random actions."""
    env = wrap_env(factory, num_envs=NUM_ENVS, seed=0)
    generator = torch.Generator().manual_seed(0)
    _, infos = env.reset()
    began = None
    for step in range(steps + 10):
        if step == 10:  # the first steps warm up
            began = time.perf_counter()
        actions = masked_random_actions(env, infos, generator) if "action_mask" in infos else random_actions(env, generator)
        _, _, _, _, infos = env.step(actions)
    seconds = time.perf_counter() - began
    env.close()
    per_step = seconds / (steps * NUM_ENVS)
    return {"microseconds_per_env_step": round(per_step * 1e6, 1), "env_steps_per_second": round(1 / per_step)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400, help="vectorized steps timed per env")
    parser.add_argument("--output", default=str(ROOT / "benchmarks/results/env_cost.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {"num_envs": NUM_ENVS, "steps": args.steps, "envs": {}}
    for name, (package, factory) in ENVS.items():
        if importlib.util.find_spec(package) is None:
            print(f"{name}: skipped ({package} is not installed)")
            continue
        results["envs"][name] = figures = measure(factory, args.steps)
        print(f"{name}: {figures['microseconds_per_env_step']} us per env step, "
              f"{figures['env_steps_per_second']} env steps per second", flush=True)
    pathlib.Path(args.output).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
