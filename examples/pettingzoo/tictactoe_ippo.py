"""Self-play IPPO on PettingZoo's tic-tac-toe (``tictactoe_v3``, a turn-based AEC env with action masks).

One policy and one critic play both seats: each player sees the board from its own side, so the
same network learns to play first and second. Only the player to move is active at a step, illegal
moves get zero probability, and the final reward reaches the loser's last move. The trained policy
is evaluated greedily against a uniform random legal player on each seat.
Run ``python examples/pettingzoo/tictactoe_ippo.py --help`` for the options.
"""

import argparse
import os
import time

import torch
from pettingzoo.classic import tictactoe_v3

from marlparts.agents import IPPO, IPPO_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, mlp
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed

NUM_ENVS = 64  # games played together
TIMESTEPS = 1_000_000  # moves of training (all games counted)
DIRECTORY = "runs/tictactoe_ippo"


class Policy(CategoricalMixin, Model):
    """An MLP that outputs the logits of the move; the env's action mask removes illegal moves."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(128, 128), output_gain=0.01)

    def compute(self, inputs, role=""):
        """Logits for ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    """An MLP that outputs the value of a player's view of the board."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(128, 128))

    def compute(self, inputs, role=""):
        """Value of ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


def make_env(num_envs: int = NUM_ENVS, seed: int = 0) -> MultiAgentEnv:
    """``num_envs`` tic-tac-toe games."""
    return wrap_env(lambda: tictactoe_v3.env(), num_envs=num_envs, seed=seed)


def make_agent(env: MultiAgentEnv, directory: str = DIRECTORY, **overrides) -> IPPO:
    """IPPO with one policy and one critic for both players (self-play)."""
    uid = env.possible_agents[0]
    policy = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    value = Value(observation_space=env.observation_space(uid))
    models = {uid: {"policy": policy, "value": value} for uid in env.possible_agents}

    cfg = IPPO_DEFAULT_CONFIG.copy()
    cfg["rollouts"] = 32
    cfg["learning_epochs"] = 4
    cfg["mini_batches"] = 4
    cfg["value_min_steps"] = 16  # the critic's steps are the epochs' 16: its figures were measured so
    cfg["learning_rate"] = 1e-3
    cfg["discount_factor"] = 0.99
    cfg["entropy_loss_scale"] = 0.1  # keeps both seats exploring, so the policy also meets weak moves
    cfg["experiment"]["directory"] = directory
    cfg.update(overrides)
    memories = {uid: RandomMemory(memory_size=cfg["rollouts"], num_envs=env.num_envs) for uid in env.possible_agents}
    return IPPO(possible_agents=env.possible_agents, models=models, memories=memories,
                observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                device=env.device, cfg=cfg)


def evaluate_against_random(trainer: SequentialTrainer, games: int) -> dict:
    """Greedy play against a uniform random legal player, on each seat: the seat's win, draw and loss rates."""
    first, second = trainer.env.possible_agents
    return {first: trainer.eval(games, opponents={second: "random"})["outcomes"][first],
            second: trainer.eval(games, opponents={first: "random"})["outcomes"][second]}


def parse_arguments() -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=TIMESTEPS, help="moves to train for (all games counted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS, help="games played together")
    parser.add_argument("--directory", default=DIRECTORY, help="where TensorBoard logs and checkpoints go")
    parser.add_argument("--checkpoint", help="load this checkpoint first: training resumes from it")
    parser.add_argument("--eval", action="store_true", help="only evaluate the agent of --checkpoint, no training")
    parser.add_argument("--games", type=int, default=1000, help="evaluation games per seat")
    return parser.parse_args()


def main() -> None:
    """Train by self-play (or resume, or only evaluate), save the agent, and print its results against a
    random player on each seat.
    """
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
        seconds = time.perf_counter() - began
        checkpoint = os.path.join(agent.experiment_dir, "checkpoints", "final_agent.pt")
        agent.save(checkpoint)
        print(f"trained {trainer.cfg['timesteps'] * env.num_envs} moves in {seconds:.1f} s; checkpoint: {checkpoint}")
    for seat, rates in evaluate_against_random(trainer, args.games).items():
        print(f"{seat} against a random player, {args.games} games: win {rates['win']:.1%}, draw {rates['draw']:.1%}, "
              f"loss {rates['loss']:.1%}")
    env.close()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
