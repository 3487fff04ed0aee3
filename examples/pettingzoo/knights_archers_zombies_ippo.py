"""IPPO on PettingZoo's knights_archers_zombies (``knights_archers_zombies_v11``): agents that leave mid-episode.

Two archers and two knights kill zombies (+1 each); a zombie that reaches an agent kills it, and the
agent leaves the episode: from then on it is inactive, its observation zeros, and nothing of it
enters a loss. Archers share a policy and a critic, knights share another pair; each critic reads
only the agent's own observation. The trained agents are evaluated greedily next to random actions.
Run ``python examples/pettingzoo/knights_archers_zombies_ippo.py --help``.
"""

import argparse
import os
import time

import torch
from pettingzoo.butterfly import knights_archers_zombies_v11

from marlparts.agents import IPPO, IPPO_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, mlp
from marlparts.resources import RunningStandardScaler
from marlparts.trainers import SequentialTrainer
from marlparts.trainers.opponents import random_team
from marlparts.utils import set_seed

NUM_ENVS = 32  # env copies stepped together
TIMESTEPS = 300_000  # env steps of training (all copies counted)
ROLLOUTS = 64
MAX_CYCLES = 300  # steps per episode at most (agents leave earlier when killed)
DIRECTORY = "runs/knights_archers_zombies_ippo"


class Policy(CategoricalMixin, Model):
    """An MLP that outputs the logits of a categorical policy."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(128, 128), output_gain=0.01)

    def compute(self, inputs, role=""):
        """Logits for ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    """An MLP from an agent's observation to its value."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(128, 128))

    def compute(self, inputs, role=""):
        """Values of ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


def make_env(num_envs: int = NUM_ENVS, workers: int = 0, seed: int = 0, max_cycles: int = MAX_CYCLES) -> MultiAgentEnv:
    """knights_archers_zombies_v11 (vector observations, at most ``max_cycles`` steps) as ``num_envs`` copies."""
    return wrap_env(lambda: knights_archers_zombies_v11.parallel_env(max_cycles=max_cycles), num_envs=num_envs,
                    workers=workers, seed=seed, state_source="observations")


def make_agent(env: MultiAgentEnv, directory: str = DIRECTORY, **overrides) -> IPPO:
    """IPPO with a policy and a critic per kind of agent (archers, knights)."""
    models = {}
    for kind in ("archer", "knight"):
        space = env.observation_space(f"{kind}_0")
        pair = {"policy": Policy(observation_space=space, action_space=env.action_space(f"{kind}_0")),
                "value": Value(observation_space=space)}
        models.update({uid: pair for uid in env.possible_agents if uid.startswith(kind)})
    cfg = IPPO_DEFAULT_CONFIG.copy()
    cfg["rollouts"] = ROLLOUTS
    cfg["learning_epochs"] = 5
    cfg["mini_batches"] = 4
    cfg["learning_rate"] = 5e-4
    cfg["entropy_loss_scale"] = 0.01
    cfg["observation_preprocessor"] = RunningStandardScaler
    cfg["experiment"]["directory"] = directory
    cfg.update(overrides)
    memories = {uid: RandomMemory(memory_size=ROLLOUTS, num_envs=env.num_envs) for uid in env.possible_agents}
    return IPPO(possible_agents=env.possible_agents, models=models, memories=memories,
                observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, device=env.device,
                cfg=cfg)


def parse_arguments() -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=TIMESTEPS, help="env steps to train for (all copies counted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS, help="env copies stepped together")
    parser.add_argument("--workers", type=int, default=0, help="worker processes for the env copies (0: none)")
    parser.add_argument("--max-cycles", type=int, default=MAX_CYCLES, help="steps per episode at most")
    parser.add_argument("--directory", default=DIRECTORY, help="where TensorBoard logs and checkpoints go")
    parser.add_argument("--checkpoint", help="load this checkpoint first: training resumes from it")
    parser.add_argument("--eval", action="store_true", help="only evaluate the agent of --checkpoint, no training")
    parser.add_argument("--episodes", type=int, default=50, help="evaluation episodes")
    return parser.parse_args()


def main() -> None:
    """Train (or resume, or only evaluate), save the agents, and print their greedy evaluation next to random play."""
    args = parse_arguments()
    if args.eval and not args.checkpoint:
        raise SystemExit("--eval evaluates a saved agent: give its file with --checkpoint")
    set_seed(args.seed)
    env = make_env(args.num_envs, args.workers, args.seed, args.max_cycles)
    agent = make_agent(env, args.directory)
    if args.checkpoint:
        agent.load(args.checkpoint)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": args.timesteps // env.num_envs,
                                                             "eval_num_envs": min(env.num_envs, args.episodes)})
    if not args.eval:
        began = time.perf_counter()
        trainer.train()
        checkpoint = os.path.join(agent.experiment_dir, "checkpoints", "final_agent.pt")
        agent.save(checkpoint)
        print(f"trained {trainer.cfg['timesteps'] * env.num_envs} env steps in {time.perf_counter() - began:.1f} s; "
              f"checkpoint: {checkpoint}")
    result = trainer.eval(args.episodes)
    random_play = trainer.eval(args.episodes, opponents=random_team(env.possible_agents))
    print(f"greedy evaluation over {result['episodes']} episodes: zombies killed per agent {result['mean_return']:.2f} "
          f"(random actions: {sum(random_play['returns'].values()) / env.num_agents:.2f}); episode length "
          f"{result['mean_length']:.0f} (random {random_play['mean_length']:.0f})")
    env.close()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
