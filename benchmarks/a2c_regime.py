"""IPPO in A2C's regime (one gradient step per 5-step rollout) on simple_spread, per value normaliser, and IA2C.

    python benchmarks/a2c_regime.py --seeds 0 2 --variants popart running_scaler none ia2c

Trains the IPPO example (shared policy and critic, 16 copies) for 200k env steps with
``learning_epochs=1, mini_batches=1, rollouts=5`` and one value normaliser per variant:
``popart`` (the default, :class:`marlparts.resources.PopArt`), ``running_scaler`` (the plain
running standardisation of the returns) or ``none``, each with the other defaults (among them
``value_min_steps=20``: the critic tops its one joint step up to twenty alone); ``ia2c`` trains
:class:`marlparts.agents.IA2C` with its defaults (the same regime, A2C's loss, no value normaliser, one
critic step) on the example's models. The other variants change more settings (see ``SETTINGS``): the
critic at A2C's one step per rollout (``value_min_steps=1``), as every run was before the critic's
steps were topped up, with one more setting changed to tell which part of the update the failure comes
from; four or ten critic steps; or one critic step at ten times the policy's learning rate.
Each run reports its greedy return over 100
evaluation episodes, the normaliser's final statistics (a runaway shows there), the policy's final
entropy, and how much the critic says about the state: the standard deviation of its values over
the last rollout's steps and their correlation with the returns (a critic that is one constant
has 0 for both). Results go to ``benchmarks/results/a2c_regime.json`` after every run; runs already
there are not repeated.
"""

import argparse
import csv
import importlib.util
import json
import pathlib
import tempfile
import time

import torch

from marlparts.agents import IA2C, IA2C_DEFAULT_CONFIG
from marlparts.memories import RandomMemory
from marlparts.resources import PopArt, RunningStandardScaler
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "a2c_regime.json"
NORMALISERS = {"popart": PopArt, "running_scaler": RunningStandardScaler, "none": None}
ONE_CRITIC_STEP = {"value_min_steps": 1}  # the critic takes A2C's one step per rollout too
# variants that change more settings: (normaliser, the example's config overrides, the critic's learning rate
# as a multiple of the policy's)
SETTINGS = {
    "popart_one_critic_step": ("popart", ONE_CRITIC_STEP, 1.0),
    "running_scaler_one_critic_step": ("running_scaler", ONE_CRITIC_STEP, 1.0),
    "none_one_critic_step": ("none", ONE_CRITIC_STEP, 1.0),
    "popart_four_critic_steps": ("popart", {"value_min_steps": 4}, 1.0),
    "popart_ten_critic_steps": ("popart", {"value_min_steps": 10}, 1.0),
    "running_scaler_ten_critic_steps": ("running_scaler", {"value_min_steps": 10}, 1.0),
    "none_ten_critic_steps": ("none", {"value_min_steps": 10}, 1.0),
    "popart_one_critic_step_critic_learning_rate_x10": ("popart", ONE_CRITIC_STEP, 10.0),
    "popart_unclipped_targets": ("popart", {**ONE_CRITIC_STEP, "value_preprocessor_kwargs": {"clip_threshold": 1e9}},
                                 1.0),
    "popart_lambda_1": ("popart", {**ONE_CRITIC_STEP, "gae_lambda": 1.0}, 1.0),
    "popart_no_time_limit_bootstrap": ("popart", {**ONE_CRITIC_STEP, "time_limit_bootstrap": False}, 1.0),
    "popart_learning_rate_1e-4": ("popart", {**ONE_CRITIC_STEP, "learning_rate": 1e-4}, 1.0),
    "popart_discount_0.9": ("popart", {**ONE_CRITIC_STEP, "discount_factor": 0.9}, 1.0),
    "none_value_loss_x100": ("none", {**ONE_CRITIC_STEP, "value_loss_scale": 100.0}, 1.0),
}
VARIANTS = [*NORMALISERS, "ia2c", *SETTINGS]


def load_example():
    """The IPPO example as a module (its make_env and make_agent)."""
    spec = importlib.util.spec_from_file_location("ippo_example", ROOT / "examples" / "mpe" / "simple_spread_ippo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def final_entropy(directory: str) -> float:
    """The policy's entropy at the last update, read from the run's scalars.csv."""
    (path,) = pathlib.Path(directory).glob("*/scalars.csv")
    with path.open() as file:
        values = [float(row["value"]) for row in csv.DictReader(file) if row["tag"] == "Policy / entropy"]
    return values[-1]


def make_ia2c(example, env, directory: str) -> IA2C:
    """IA2C with its defaults on the IPPO example's models and input standardisation."""
    uid = env.possible_agents[0]
    policy = example.Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    value = example.Value(observation_space=env.observation_space(uid))
    cfg = IA2C_DEFAULT_CONFIG.copy()
    cfg["observation_preprocessor"] = cfg["state_preprocessor"] = RunningStandardScaler
    cfg["experiment"]["directory"] = directory
    memories = {uid: RandomMemory(memory_size=cfg["rollouts"], num_envs=env.num_envs) for uid in env.possible_agents}
    return IA2C(possible_agents=env.possible_agents, models={uid: {"policy": policy, "value": value}
                                                             for uid in env.possible_agents},
                memories=memories, observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                device=env.device, cfg=cfg)


def run(example, seed: int, variant: str, timesteps: int) -> dict:
    """Train one seed with one normaliser and measure it."""
    set_seed(seed)
    env = example.make_env(16, 0, seed)
    with tempfile.TemporaryDirectory() as directory:
        if variant == "ia2c":
            agent = make_ia2c(example, env, directory)
        else:
            normaliser, overrides, critic_rate = SETTINGS.get(variant, (variant, {}, 1.0))
            agent = example.make_agent(env, directory, learning_epochs=1, mini_batches=1, rollouts=5,
                                       value_preprocessor=NORMALISERS[normaliser], **overrides)
            for parameters in agent.groups[0].trained["value"].optimizer.param_groups:
                parameters["lr"] *= critic_rate
        trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": timesteps // env.num_envs,
                                                                "disable_progressbar": True, "eval_actions": "greedy"})
        began = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - began
        report = trainer.eval(episodes=100)
        group = agent.groups[0]
        values = group.memory.get_tensor_by_name("values").flatten()
        returns = group.memory.get_tensor_by_name("returns").flatten()
        normaliser = group.trained["value"].value_normaliser
        result = {"seed": seed, "variant": variant, "env_steps": timesteps, "greedy_return": report["mean_return"],
                  "final_entropy": final_entropy(directory), "critic_value_std": float(values.std()),
                  "critic_value_return_correlation": float(torch.corrcoef(torch.stack([values, returns]))[0, 1]),
                  "train_seconds": round(seconds, 1)}
        if normaliser is not None:
            result["normaliser_mean"] = float(normaliser.running_mean)
            result["normaliser_std"] = float(normaliser.running_variance.sqrt())
    env.close()
    return result


def main() -> None:
    """Run every (seed, variant) not yet in the results file, writing it after each."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--timesteps", type=int, default=200_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"runs": []}
    done = {(entry["seed"], entry["variant"], entry["env_steps"]) for entry in results["runs"]}
    example = load_example()
    for variant in args.variants:
        for seed in args.seeds:
            if (seed, variant, args.timesteps) in done:
                continue
            entry = run(example, seed, variant, args.timesteps)
            print(json.dumps(entry), flush=True)
            results["runs"].append(entry)
            RESULTS.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
