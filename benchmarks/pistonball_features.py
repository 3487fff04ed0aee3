"""Whether the pistonball example's shared encoder keeps seeing the frames as it trains.

Trains the example's agent (``examples/pettingzoo/pistonball_ippo.py``: 4 copies, its PPO settings, with the
given overrides; the results in ``benchmarks/results`` were taken when the example ran 4 copies with 8
minibatches of 320 samples: add ``"mini_batches": 8`` to the overrides to repeat them) update by update, and
after each update feeds one fixed batch of observations (20 pistons at 4 moments of an episode of random
moves) through its encoder. It prints and writes, per update: how many of the encoder's 512 features are
active for some observation, their standard deviation over the batch (mean over the features), and how far
the move probabilities spread across the batch (max - min of each move's probability). An encoder whose
features are the same for every piston and frame leaves the policy blind:
every piston then gets the same move probabilities whatever it sees.

    python benchmarks/pistonball_features.py --updates 8 --overrides '{"mini_batches": 8, "value_loss_scale": 0.5}' \\
        --output benchmarks/results/pistonball_features_value_0.5_seed_0.json
"""

import argparse
import json
import os
import pathlib
import sys
import tempfile

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "pettingzoo"))

import pistonball_ippo as example  # noqa: E402

from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402


def probe_batch(seed: int) -> torch.Tensor:
    """Every piston's observation at steps 10, 20, 30 and 40 of one episode of random moves."""
    env = example.make_pistonball()
    observations, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    batch = []
    for step in range(1, 41):
        observations, *_ = env.step({uid: int(rng.integers(3)) for uid in env.agents})
        if step % 10 == 0:
            batch += [observations[uid] for uid in env.agents]
    env.close()
    return torch.as_tensor(np.stack(batch))


def probe(model: torch.nn.Module, batch: torch.Tensor) -> dict:
    """What the encoder makes of ``batch``: active features, their spread, and the spread of the move probabilities."""
    with torch.no_grad():
        features = model.encoder(batch)
        probabilities = torch.softmax(model.policy_head(features), dim=-1)
    return {"active_features": int((features > 0).any(dim=0).sum()),
            "feature_std": round(features.std(dim=0).mean().item(), 5),
            "probability_spread": [round(value, 4) for value in (probabilities.amax(0) - probabilities.amin(0)).tolist()],
            "mean_probabilities": [round(value, 4) for value in probabilities.mean(0).tolist()]}


def main() -> None:
    """Train update by update, probe after each, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=8, help="PPO updates (each after 32 steps of 4 copies)")
    parser.add_argument("--overrides", default="{}", help="JSON: settings of the example's agent to change")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="benchmarks/results/pistonball_features.json")
    args = parser.parse_args()
    overrides = json.loads(args.overrides)
    torch.set_num_threads(1)
    set_seed(args.seed)
    batch = probe_batch(seed=1000 + args.seed)
    env = example.make_env(num_envs=4, seed=args.seed)
    with tempfile.TemporaryDirectory() as directory:
        agent = example.make_agent(env, directory, **overrides)
        model = agent.models[env.possible_agents[0]]["policy"]
        rollout = agent.cfg["rollouts"]
        trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": rollout, "disable_progressbar": True})
        rows = [{"update": 0, "env_steps": 0, **probe(model, batch)}]
        print(json.dumps(rows[-1]), flush=True)
        for update in range(1, args.updates + 1):
            trainer.train()  # one rollout of every copy, then one update
            rows.append({"update": update, "env_steps": update * rollout * env.num_envs, **probe(model, batch)})
            print(json.dumps(rows[-1]), flush=True)
    env.close()
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as file:
        json.dump({"overrides": overrides, "seed": args.seed, "probe_observations": len(batch), "updates": rows}, file,
                  indent=1)
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
