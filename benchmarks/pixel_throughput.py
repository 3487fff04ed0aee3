"""Training on pixels against the preprocessed env's own stepping rate: pistonball after SuperSuit.

    python benchmarks/pixel_throughput.py --output benchmarks/results/pixel_throughput.json

Pistonball (20 pistons, discrete moves) preprocessed as ``docs/images.rst`` shows (grey, 84x84, the last 3 frames
stacked: ``uint8`` images of 84x84x3), ``--num-envs`` copies. Training is IPPO with one policy and one critic
shared by the 20 agents, each the Nature-DQN encoder (:func:`marlparts.models.cnn`, 1.7M parameters), or with
``--shared-encoder`` one model that is both (the example ``examples/pettingzoo/pistonball_ippo.py``'s), one such
encoder with a policy head and a value head (the update then
runs one encoder per minibatch instead of two), rollouts of ``--rollouts`` steps, ``--epochs`` epochs of
``--mini-batches`` minibatches. Env-only stepping of other copies of the same env with uniform random actions is
timed beside it in alternating chunks of one rollout (A B B A ...), after a warm-up update; the figures are env
steps per second (one step of one copy, all 20 agents), their ratio, the share of the training time spent in the
update, and the bytes the rollout holds per stored step of observations. Run it on an otherwise idle machine: its
speed drifts.
"""

import argparse
import json
import pathlib
import sys
import tempfile
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples" / "pettingzoo"))

from pistonball_ippo import PolicyValue, make_pistonball  # noqa: E402
from throughput import env_stepper, interleaved  # noqa: E402

from marlparts.agents import IPPO, IPPO_DEFAULT_CONFIG  # noqa: E402
from marlparts.envs import wrap_env  # noqa: E402
from marlparts.memories import RandomMemory  # noqa: E402
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, cnn  # noqa: E402
from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402


class PixelPolicy(CategoricalMixin, Model):
    """The Nature-DQN encoder from a piston's frames to the logits of its moves."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = cnn(self.observation_space.shape, self.num_actions, input_scale=1 / 255, output_gain=0.01)

    def compute(self, inputs, role=""):
        """Logits for ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


class PixelValue(DeterministicMixin, Model):
    """The Nature-DQN encoder from a piston's frames to its value."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = cnn(self.observation_space.shape, self.num_outputs, input_scale=1 / 255)

    def compute(self, inputs, role=""):
        """Values of ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


def main() -> None:
    """Time training against env-only stepping and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--rollouts", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--mini-batches", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4, help="timed chunks of one rollout per workload")
    parser.add_argument("--threads", type=int, default=1, help="PyTorch threads")
    parser.add_argument("--shared-encoder", action="store_true",
                        help="one model, one encoder with a policy head and a value head (else two encoders)")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "pixel_throughput.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    set_seed(0)
    env = wrap_env(make_pistonball, num_envs=args.num_envs, seed=0, state_source="observations")
    env_only = env_stepper(wrap_env(make_pistonball, num_envs=args.num_envs, seed=1, state_source="observations"))
    uid = env.possible_agents[0]
    if args.shared_encoder:
        model = PolicyValue(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
        models = {"policy": model, "value": model}
    else:
        models = {"policy": PixelPolicy(observation_space=env.observation_space(uid), action_space=env.action_space(uid)),
                  "value": PixelValue(observation_space=env.observation_space(uid))}
    with tempfile.TemporaryDirectory() as directory:
        cfg = IPPO_DEFAULT_CONFIG.copy()
        cfg.update(rollouts=args.rollouts, learning_epochs=args.epochs, mini_batches=args.mini_batches,
                   learning_rate=5e-4)
        cfg["experiment"].update(directory=directory, tensorboard=False, csv=False, checkpoint_interval=0)
        agent = IPPO(possible_agents=env.possible_agents, models={u: models for u in env.possible_agents},
                     memories={u: RandomMemory(memory_size=args.rollouts, num_envs=args.num_envs)
                               for u in env.possible_agents},
                     observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, cfg=cfg)
        trainer = SequentialTrainer(env=env, agents=agent, cfg={"disable_progressbar": True})
        update_seconds = [0.0]
        update = agent.update

        def timed_update(*update_args):
            began = time.perf_counter()
            update(*update_args)
            update_seconds[0] += time.perf_counter() - began

        def train(n: int) -> None:
            trainer.cfg["timesteps"] = n
            trainer.train()

        agent.update = timed_update
        train_seconds, env_seconds = interleaved(train, env_only, args.rollouts, args.rounds)
        timed_updates = update_seconds[0] * args.rounds / (args.rounds + 1)  # the untimed first chunk updated too
        stored = agent.groups[0].memory.tensors["observations"]
    figures = {
        "num_envs": args.num_envs, "rollouts": args.rollouts, "epochs": args.epochs, "mini_batches": args.mini_batches,
        "threads": args.threads, "agents": len(env.possible_agents), "shared_encoder": args.shared_encoder,
        "env_only_steps_per_s": args.num_envs / env_seconds,
        "training_steps_per_s": args.num_envs / train_seconds,
        "training_over_env_only": env_seconds / train_seconds,
        "update_share_of_training": timed_updates / (train_seconds * args.rollouts * args.rounds),
        "stored_observation_dtype": str(stored.dtype).replace("torch.", ""),
        "stored_observation_bytes_per_step": stored[0].numel() * stored.element_size(),
    }
    env.close()
    for key, value in figures.items():
        print(f"{key:36s} {value:.4g}" if isinstance(value, float) else f"{key:36s} {value}")
    pathlib.Path(args.output).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
