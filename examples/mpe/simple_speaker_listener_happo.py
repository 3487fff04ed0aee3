"""HAPPO on MPE simple_speaker_listener (a speaker and a listener): a policy of its own for each agent.

The speaker sees the target landmark's colour and can only talk (3 words); the listener hears it and moves. Their
policies (their spaces differ) are trained one after the other in a random order at each update, each on its
advantages weighted by the probability ratio of the agent updated before it; one centralised critic reads
the global state and outputs one value per agent.
Run ``python examples/mpe/simple_speaker_listener_happo.py --help`` for the options.
"""

import argparse
import os
import time

import torch
from mpe2 import simple_speaker_listener_v4

from marlparts.agents import HAPPO, HAPPO_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, mlp
from marlparts.resources import RunningStandardScaler
from marlparts.trainers import SequentialTrainer
from marlparts.trainers.opponents import random_team
from marlparts.utils import set_seed

NUM_ENVS = 64  # env copies stepped together
TIMESTEPS = 1_000_000  # env steps of training (all copies counted)
DIRECTORY = "runs/simple_speaker_listener_happo"


class Policy(CategoricalMixin, Model):
    """An MLP that outputs the logits of a categorical policy (sized by the agent's own spaces)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(64, 64), output_gain=0.01)

    def compute(self, inputs, role=""):
        """Logits for ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    """An MLP from the global state to one value per agent."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(64, 64))

    def compute(self, inputs, role=""):
        """Values of ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


def make_env(num_envs: int = NUM_ENVS, seed: int = 0) -> MultiAgentEnv:
    """simple_speaker_listener_v4 (25 steps) as ``num_envs`` copies."""
    return wrap_env(lambda: simple_speaker_listener_v4.parallel_env(max_cycles=25), num_envs=num_envs, seed=seed,
                    state_source="observations")


def make_agent(env: MultiAgentEnv, directory: str = DIRECTORY, **overrides) -> HAPPO:
    """HAPPO with a policy per agent and one centralised critic for both."""
    critic = Value(observation_space=env.state_space, output_size=env.num_agents)
    models = {uid: {"policy": Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid)),
                    "value": critic} for uid in env.possible_agents}
    cfg = HAPPO_DEFAULT_CONFIG.copy()
    cfg["rollouts"] = 25  # one whole episode of every copy per update
    cfg["learning_epochs"] = 10
    cfg["mini_batches"] = 4
    cfg["learning_rate"] = 1.5e-3
    cfg["discount_factor"] = 0.95
    cfg["observation_preprocessor"] = RunningStandardScaler
    cfg["state_preprocessor"] = RunningStandardScaler
    cfg["experiment"]["directory"] = directory
    cfg.update(overrides)
    memories = {uid: RandomMemory(memory_size=cfg["rollouts"], num_envs=env.num_envs) for uid in env.possible_agents}
    return HAPPO(possible_agents=env.possible_agents, models=models, memories=memories,
                 observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                 state_spaces=env.state_spaces, device=env.device, cfg=cfg)


def parse_arguments() -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=TIMESTEPS, help="env steps to train for (all copies counted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS, help="env copies stepped together")
    parser.add_argument("--directory", default=DIRECTORY, help="where TensorBoard logs and checkpoints go")
    parser.add_argument("--checkpoint", help="load this checkpoint first: training resumes from it")
    parser.add_argument("--eval", action="store_true", help="only evaluate the agent of --checkpoint, no training")
    parser.add_argument("--episodes", type=int, default=100, help="evaluation episodes")
    return parser.parse_args()


def main() -> None:
    """Train (or resume, or only evaluate), save the agent, and print its greedy evaluation next to random play."""
    args = parse_arguments()
    if args.eval and not args.checkpoint:
        raise SystemExit("--eval evaluates a saved agent: give its file with --checkpoint")
    set_seed(args.seed)
    env = make_env(args.num_envs, args.seed)
    agent = make_agent(env, args.directory)
    if args.checkpoint:
        agent.load(args.checkpoint)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": args.timesteps // env.num_envs})
    if not args.eval:
        began = time.perf_counter()
        trainer.train()
        checkpoint = os.path.join(agent.experiment_dir, "checkpoints", "final_agent.pt")
        agent.save(checkpoint)
        print(f"trained {trainer.cfg['timesteps'] * env.num_envs} env steps in {time.perf_counter() - began:.1f} s; "
              f"checkpoint: {checkpoint}")
    result = trainer.eval(args.episodes)
    random_play = trainer.eval(args.episodes, opponents=random_team(env.possible_agents))["returns"]
    per_agent = ", ".join(f"{uid} {value:.2f} (random {random_play[uid]:.2f})" for uid, value in result["returns"].items())
    print(f"greedy evaluation over {result['episodes']} episodes: mean return {result['mean_return']:.2f}; "
          f"per agent: {per_agent}")
    env.close()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
