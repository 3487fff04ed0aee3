"""Two teams in one env: MAPPO predators against a MADDPG prey on MPE simple_tag (3 predators, 1 prey).

Each algorithm owns its team's agent ids and takes its own entries of the env's space dicts; one
trainer steps both. The progress bar, TensorBoard and evaluation report each team on its own.
At the end each team plays against a uniform random team on the other side, next to what a random
team scores in its place. Run ``python examples/mpe/simple_tag_teams.py --help`` for the options.
"""

import argparse
import os
import time

import torch
from mpe2 import simple_tag_v3

from marlparts.agents import MADDPG, MADDPG_DEFAULT_CONFIG, MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, mlp
from marlparts.trainers import SequentialTrainer
from marlparts.trainers.opponents import random_team
from marlparts.utils import set_seed
from marlparts.utils.spaces import joint_space

NUM_ENVS = 32  # env copies stepped together
TIMESTEPS = 1_000_000  # env steps of training (all copies counted)
DIRECTORY = "runs/simple_tag_teams"


class Policy(CategoricalMixin, Model):
    """The predators' policy: an MLP that outputs the logits of a categorical policy."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(64, 64), output_gain=0.01)

    def compute(self, inputs, role=""):
        """Logits for ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


class Net(DeterministicMixin, Model):
    """An MLP with a plain output: the predators' centralised critic, and the prey's logits and critic."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(64, 64), activation=torch.nn.ReLU)

    def compute(self, inputs, role=""):
        """The output for ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


def make_env(num_envs: int = NUM_ENVS, seed: int = 0) -> MultiAgentEnv:
    """simple_tag_v3 (3 predators, 1 prey, 2 obstacles, 25 steps) as ``num_envs`` copies."""
    return wrap_env(lambda: simple_tag_v3.parallel_env(max_cycles=25), num_envs=num_envs, seed=seed,
                    state_source="observations")


def make_predators(env: MultiAgentEnv, directory: str = DIRECTORY) -> MAPPO:
    """MAPPO for the predators: one shared policy, one centralised critic with a value per predator."""
    predators = [uid for uid in env.possible_agents if uid.startswith("adversary")]
    policy = Policy(observation_space=env.observation_space(predators[0]), action_space=env.action_space(predators[0]))
    critic = Net(observation_space=env.state_space, output_size=len(predators))
    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg["rollouts"] = 25
    cfg["learning_rate"] = 1e-3
    cfg["discount_factor"] = 0.95
    cfg["experiment"]["directory"] = directory
    return MAPPO(possible_agents=predators, models={uid: {"policy": policy, "value": critic} for uid in predators},
                 memories={uid: RandomMemory(memory_size=25, num_envs=env.num_envs) for uid in predators},
                 observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                 state_spaces=env.state_spaces, device=env.device, cfg=cfg)


def make_prey(env: MultiAgentEnv, directory: str = DIRECTORY) -> MADDPG:
    """MADDPG for the prey (Gumbel-softmax over its discrete moves), its critic on its own observation and move."""
    prey = [uid for uid in env.possible_agents if not uid.startswith("adversary")]
    policy = Net(observation_space=env.observation_space(prey[0]), output_size=env.action_space(prey[0]).n)
    critic = Net(observation_space=joint_space([env.observation_space(prey[0]), env.action_space(prey[0])]))
    cfg = MADDPG_DEFAULT_CONFIG.copy()
    cfg["batch_size"] = 1024
    cfg["learning_starts"] = 100
    cfg["update_interval"] = 4
    cfg["discount_factor"] = 0.95
    cfg["polyak"] = 0.01
    cfg["experiment"]["directory"] = directory
    return MADDPG(possible_agents=prey, models={uid: {"policy": policy, "critic": critic} for uid in prey},
                  memories={uid: RandomMemory(memory_size=200_000 // env.num_envs, num_envs=env.num_envs)
                            for uid in prey},
                  observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                  state_spaces=env.state_spaces, device=env.device, cfg=cfg)


def against_random_teams(trainer: SequentialTrainer, episodes: int) -> dict:
    """Each team's mean return against a random team on the other side, and a random team's in its place."""
    predators, prey = trainer.agents
    both_random = trainer.eval(episodes, opponents=random_team(trainer.env.possible_agents))["returns"]
    return {
        "predators": trainer.eval(episodes, opponents=random_team(prey.possible_agents))["teams"]["MAPPO"]["mean_return"],
        "random predators": sum(both_random[uid] for uid in predators.possible_agents) / len(predators.possible_agents),
        "prey": trainer.eval(episodes, opponents=random_team(predators.possible_agents))["teams"]["MADDPG"]["mean_return"],
        "random prey": sum(both_random[uid] for uid in prey.possible_agents) / len(prey.possible_agents),
    }


def parse_arguments() -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=TIMESTEPS, help="env steps to train for (all copies counted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS, help="env copies stepped together")
    parser.add_argument("--directory", default=DIRECTORY, help="where TensorBoard logs and checkpoints go")
    parser.add_argument("--checkpoint", nargs=2, metavar=("PREDATORS", "PREY"),
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
    teams = [make_predators(env, args.directory), make_prey(env, args.directory)]
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
    result = against_random_teams(trainer, args.episodes)
    print(f"predators (MAPPO) against a random prey: mean return {result['predators']:.2f} "
          f"(random predators: {result['random predators']:.2f})")
    print(f"prey (MADDPG) against random predators: return {result['prey']:.2f} "
          f"(a random prey: {result['random prey']:.2f})")
    env.close()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
