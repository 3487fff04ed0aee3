"""IPPO with a shared CNN on SISL pursuit (``pursuit_v5``): image-like views, 8 pursuers.

Eight pursuers chase 30 evaders on a 16x16 grid; an evader surrounded by pursuers is caught (+5 to
each pursuer that touches it), touching one gives +0.01, and every step costs -0.1. Each pursuer
sees a 7x7 window around itself with 3 channels (walls, pursuers, evaders), channels last: one
policy and one critic, both convolutional (:func:`marlparts.models.cnn` with 3x3 kernels, as the
Nature encoder's 8x8 ones do not fit a 7x7 view), are shared by every pursuer; the critic reads only
the pursuer's own view. The trained pursuers are evaluated with sampled and with greedy actions on
copies seeded apart from training, next to random actions. Run
``python examples/pettingzoo/pursuit_ippo.py --help``.
"""

import argparse
import os
import time

import torch
from pettingzoo.sisl import pursuit_v5

from marlparts.agents import IPPO, IPPO_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, cnn
from marlparts.trainers import SequentialTrainer
from marlparts.trainers.opponents import random_team
from marlparts.utils import set_seed

NUM_ENVS = 16  # env copies stepped together
TIMESTEPS = 200_000  # env steps of training (all copies counted)
MAX_CYCLES = 250  # steps per episode (pursuit's default is 500)
DIRECTORY = "runs/pursuit_ippo"
# small views take small kernels: two 3x3 convolutions at stride 1 leave a 3x3 map
ENCODER = {"channels": (32, 32), "kernel_sizes": (3, 3), "strides": (1, 1), "hidden_sizes": (128,)}


class Policy(CategoricalMixin, Model):
    """A CNN from a pursuer's view to the logits of its five moves."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = cnn(self.observation_space.shape, self.num_actions, output_gain=0.01, **ENCODER)

    def compute(self, inputs, role=""):
        """Logits for ``inputs["observations"]`` (flattened 7x7x3 views)."""
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    """A CNN from a pursuer's view to its value."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = cnn(self.observation_space.shape, self.num_outputs, **ENCODER)

    def compute(self, inputs, role=""):
        """Values of ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


def make_env(num_envs: int = NUM_ENVS, workers: int = 0, seed: int = 0, max_cycles: int = MAX_CYCLES) -> MultiAgentEnv:
    """pursuit_v5 (8 pursuers, 30 evaders, episodes of ``max_cycles`` steps) as ``num_envs`` copies."""
    return wrap_env(lambda: pursuit_v5.parallel_env(max_cycles=max_cycles), num_envs=num_envs, workers=workers,
                    seed=seed, state_source="observations")


def make_agent(env: MultiAgentEnv, directory: str = DIRECTORY, **overrides) -> IPPO:
    """IPPO with one convolutional policy and one convolutional critic shared by every pursuer."""
    uid = env.possible_agents[0]
    policy = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    value = Value(observation_space=env.observation_space(uid))
    cfg = IPPO_DEFAULT_CONFIG.copy()
    cfg["rollouts"] = 64  # 16 copies x 64 steps x 8 pursuers = 8192 samples per update
    cfg["learning_epochs"] = 10
    cfg["mini_batches"] = 4  # 40 gradient steps per update: with 4 epochs and lr 5e-4 nothing was learned at 100k
    cfg["learning_rate"] = 7e-4
    cfg["entropy_loss_scale"] = 0.01
    cfg["experiment"]["directory"] = directory
    cfg.update(overrides)
    memories = {uid: RandomMemory(memory_size=cfg["rollouts"], num_envs=env.num_envs) for uid in env.possible_agents}
    return IPPO(possible_agents=env.possible_agents, models={uid: {"policy": policy, "value": value}
                                                             for uid in env.possible_agents},
                memories=memories, observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                device=env.device, cfg=cfg)


def parse_arguments() -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=TIMESTEPS, help="env steps to train for (all copies counted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS, help="env copies stepped together")
    parser.add_argument("--workers", type=int, default=0, help="worker processes for the env copies (0: none)")
    parser.add_argument("--max-cycles", type=int, default=MAX_CYCLES, help="steps per episode")
    parser.add_argument("--directory", default=DIRECTORY, help="where TensorBoard logs and checkpoints go")
    parser.add_argument("--checkpoint", help="load this checkpoint first: training resumes from it")
    parser.add_argument("--eval", action="store_true", help="only evaluate the agent of --checkpoint, no training")
    parser.add_argument("--episodes", type=int, default=16, help="evaluation episodes")
    return parser.parse_args()


def main() -> None:
    """Train (or resume, or only evaluate), save the agent, and print its evaluation next to random play."""
    args = parse_arguments()
    if args.eval and not args.checkpoint:
        raise SystemExit("--eval evaluates a saved agent: give its file with --checkpoint")
    set_seed(args.seed)
    env = make_env(args.num_envs, args.workers, args.seed, args.max_cycles)
    agent = make_agent(env, args.directory)
    if args.checkpoint:
        agent.load(args.checkpoint)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": args.timesteps // env.num_envs,
                                                             "eval_num_envs": min(env.num_envs, args.episodes),
                                                             "eval_actions": "both"})
    if not args.eval:
        began = time.perf_counter()
        trainer.train()
        checkpoint = os.path.join(agent.experiment_dir, "checkpoints", "final_agent.pt")
        agent.save(checkpoint)
        print(f"trained {trainer.cfg['timesteps'] * env.num_envs} env steps in {time.perf_counter() - began:.1f} s; "
              f"checkpoint: {checkpoint}")
    result = trainer.eval(args.episodes)
    random_play = trainer.eval(args.episodes, opponents=random_team(env.possible_agents))
    print(f"evaluation over {args.episodes} episodes, return per pursuer: sampled {result['sampled']['mean_return']:.2f}, "
          f"greedy {result['greedy']['mean_return']:.2f} (random actions: {random_play['mean_return']:.2f})")
    env.close()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
