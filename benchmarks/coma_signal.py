"""How large COMA's counterfactual advantages are next to its critic's error, on a trained COMA example.

    python examples/mpe/simple_spread_coma.py --timesteps 300000 --directory runs/coma
    python benchmarks/coma_signal.py --checkpoint runs/coma/<experiment>/checkpoints/final_agent.pt

It collects one rollout (64 copies x 25 steps, on copies seeded apart from training) with the checkpoint's
policies and prints, over every agent step: the mean magnitude of the advantage ``A = Q(s, u) − b`` the
actors learn from, and the mean distance of ``Q(s, u)`` from its TD(λ) target (the critic's error). Written
to ``--output`` as JSON.
"""

import argparse
import json
import pathlib
import sys
import tempfile

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "mpe"))
import simple_spread_coma as example  # noqa: E402  (the example's builders, without running its main)

from marlparts.trainers import SequentialTrainer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="a checkpoint of examples/mpe/simple_spread_coma.py")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "coma_signal.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    env = example.make_env(64, seed=123)
    with tempfile.TemporaryDirectory() as directory:
        agent = example.make_agent(env, directory)
        agent.load(args.checkpoint)
        seen = {}

        def advantages_only(timestep, timesteps):  # the update's first step, then nothing is trained
            agent.compute_advantages()
            memory = agent.groups[0].memory
            seen.update({name: memory.get_tensor_by_name(name).clone() for name in ("advantages", "values", "returns")})

        agent.update = advantages_only
        SequentialTrainer(env=env, agents=agent, cfg={"timesteps": agent.cfg["rollouts"],
                                                      "disable_progressbar": True}).train()
    result = {"checkpoint": args.checkpoint, "mean_abs_advantage": float(seen["advantages"].abs().mean()),
              "std_advantage": float(seen["advantages"].std()),
              "mean_abs_critic_error": float((seen["values"] - seen["returns"]).abs().mean()),
              "mean_abs_q": float(seen["values"].abs().mean())}
    print(json.dumps(result, indent=2))
    pathlib.Path(args.output).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    sys.exit(main())
