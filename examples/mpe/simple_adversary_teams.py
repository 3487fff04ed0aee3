"""Two teams in one env: MAPPO for the 2 good agents against IPPO for the adversary on MPE simple_adversary.

The good agents know which landmark is the target and are rewarded for reaching it while keeping
the adversary, who does not know it, away; the adversary is rewarded for getting close to it. Each
algorithm owns its team's agent ids and takes its own entries of the env's space dicts; one trainer
steps both and reports each team on its own. At the end each team plays against a uniform random
team on the other side, next to what a random team scores in its place.
Run ``python examples/mpe/simple_adversary_teams.py --help`` for the options.
"""

import argparse
import os
import time

import torch
from mpe2 import simple_adversary_v3

from marlparts.agents import IPPO, IPPO_DEFAULT_CONFIG, MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, mlp
from marlparts.trainers import SequentialTrainer
from marlparts.trainers.opponents import random_team
from marlparts.utils import set_seed

NUM_ENVS = 32  # env copies stepped together
TIMESTEPS = 1_000_000  # env steps of training (all copies counted)
ROLLOUTS = 25  # one whole episode of every copy per update
DIRECTORY = "runs/simple_adversary_teams"


class Policy(CategoricalMixin, Model):
    """An MLP that outputs the logits of a categorical policy."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(64, 64), output_gain=0.01)

    def compute(self, inputs, role=""):
        """Logits for ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    """An MLP that outputs values: per good agent from the global state, or the adversary's from its observation."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(64, 64))

    def compute(self, inputs, role=""):
        """Values for ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


def make_env(num_envs: int = NUM_ENVS, seed: int = 0) -> MultiAgentEnv:
    """simple_adversary_v3 (2 good agents, 1 adversary, 2 landmarks, 25 steps) as ``num_envs`` copies."""
    return wrap_env(lambda: simple_adversary_v3.parallel_env(N=2, max_cycles=25), num_envs=num_envs, seed=seed,
                    state_source="observations")


def make_teams(env: MultiAgentEnv, directory: str = DIRECTORY) -> list:
    """MAPPO for the good agents (shared policy, centralised critic), IPPO for the adversary."""
    good = [uid for uid in env.possible_agents if uid.startswith("agent")]
    adversary = [uid for uid in env.possible_agents if uid.startswith("adversary")]
    policy = Policy(observation_space=env.observation_space(good[0]), action_space=env.action_space(good[0]))
    critic = Value(observation_space=env.state_space, output_size=len(good))
    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg.update(rollouts=ROLLOUTS, learning_rate=1e-3, discount_factor=0.95)
    cfg["experiment"]["directory"] = directory
    good_team = MAPPO(possible_agents=good, models={uid: {"policy": policy, "value": critic} for uid in good},
                      memories={uid: RandomMemory(memory_size=ROLLOUTS, num_envs=env.num_envs) for uid in good},
                      observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                      state_spaces=env.state_spaces, device=env.device, cfg=cfg)
    models = {uid: {"policy": Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid)),
                    "value": Value(observation_space=env.observation_space(uid))} for uid in adversary}
    cfg = IPPO_DEFAULT_CONFIG.copy()
    cfg.update(rollouts=ROLLOUTS, learning_rate=1e-3, discount_factor=0.95)
    cfg["experiment"]["directory"] = directory
    adversary_team = IPPO(possible_agents=adversary, models=models,
                          memories={uid: RandomMemory(memory_size=ROLLOUTS, num_envs=env.num_envs) for uid in adversary},
                          observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                          device=env.device, cfg=cfg)
    return [good_team, adversary_team]


def team_mean(returns: dict, uids: list) -> float:
    """The mean of ``returns`` over ``uids``."""
    return sum(returns[uid] for uid in uids) / len(uids)


def parse_arguments() -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=TIMESTEPS, help="env steps to train for (all copies counted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS, help="env copies stepped together")
    parser.add_argument("--directory", default=DIRECTORY, help="where TensorBoard logs and checkpoints go")
    parser.add_argument("--checkpoint", nargs=2, metavar=("GOOD", "ADVERSARY"),
                        help="load these checkpoints (one per team) first: training resumes from them")
    parser.add_argument("--eval", action="store_true", help="only evaluate the teams of --checkpoint, no training")
    parser.add_argument("--episodes", type=int, default=100, help="evaluation episodes")
    return parser.parse_args()


def main() -> None:
    """Train both teams (or resume, or only evaluate), save them, and print each against a random team."""
    args = parse_arguments()
    if args.eval and not args.checkpoint:
        raise SystemExit("--eval evaluates saved teams: give their files with --checkpoint")
    set_seed(args.seed)
    env = make_env(args.num_envs, args.seed)
    good, adversary = teams = make_teams(env, args.directory)
    for team, checkpoint in zip(teams, args.checkpoint or ()):
        team.load(checkpoint)
    trainer = SequentialTrainer(env=env, agents=teams, cfg={"timesteps": args.timesteps // env.num_envs})
    if not args.eval:
        began = time.perf_counter()
        trainer.train()
        print(f"trained {trainer.cfg['timesteps'] * env.num_envs} env steps in {time.perf_counter() - began:.1f} s")
        for team in teams:
            checkpoint = os.path.join(team.experiment_dir, "checkpoints", "final_agent.pt")
            team.save(checkpoint)
            print(f"checkpoint of {type(team).__name__}: {checkpoint}")
    random_play = trainer.eval(args.episodes, opponents=random_team(env.possible_agents))["returns"]
    good_return = trainer.eval(args.episodes, opponents=random_team(adversary.possible_agents))["teams"]["MAPPO"]
    adversary_return = trainer.eval(args.episodes, opponents=random_team(good.possible_agents))["teams"]["IPPO"]
    print(f"good agents (MAPPO) against a random adversary: mean return {good_return['mean_return']:.2f} "
          f"(random good agents: {team_mean(random_play, good.possible_agents):.2f})")
    print(f"adversary (IPPO) against random good agents: return {adversary_return['mean_return']:.2f} "
          f"(a random adversary: {team_mean(random_play, adversary.possible_agents):.2f})")
    env.close()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
