"""VDN with shared utilities on Level-Based Foraging (``lbforaging``), a Gymnasium multi-agent env.

One utility network for every agent (its observation to one value per action); the team's value is the
sum of the agents' values of their chosen actions, trained on the team reward (the agents' rewards
summed). Actions are epsilon-greedy in training, greedy in evaluation, among each agent's legal moves
(LBF turns an illegal move into standing still, so a greedy agent that prefers one would stand still
for good). Episodes last at most 50 steps (a truncation, bootstrapped). ``--env`` picks the task.
Run ``python examples/lbf/foraging_vdn.py --help`` for the options.
"""

import argparse
import os
import time

import gymnasium
import lbforaging  # noqa: F401  (registers the Foraging-* envs)
import torch

from marlparts.agents import VDN, VDN_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import DeterministicMixin, Model, mlp
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed

TASK = "Foraging-8x8-2p-2f-coop-v3"
NUM_ENVS = 16  # env copies stepped together
TIMESTEPS = 2_000_000  # env steps of training (all copies counted): still rising at 1M
EVAL_INTERVAL = 100_000  # env steps between greedy evaluations
DIRECTORY = "runs/lbf_vdn"


class Utility(DeterministicMixin, Model):
    """An MLP from an agent's observation to one utility per action."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(64, 64), activation=torch.nn.ReLU)

    def compute(self, inputs, role=""):
        """Utilities of ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


def make_env(task: str = TASK, num_envs: int = NUM_ENVS, workers: int = 0, seed: int = 0) -> MultiAgentEnv:
    """``num_envs`` copies of the LBF ``task``; the wrapper gives each agent its legal moves as its action mask (LBF
    would turn an illegal move into a no-op: a greedy agent that prefers one would stand still for good).
    """
    return wrap_env(lambda: gymnasium.make(task, disable_env_checker=True), num_envs=num_envs, workers=workers,
                    seed=seed)


def make_agent(env: MultiAgentEnv, directory: str = DIRECTORY, **overrides) -> VDN:
    """VDN with one utility network shared by every agent of ``env``."""
    uid = env.possible_agents[0]
    utility = Utility(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    models = {uid: {"q": utility} for uid in env.possible_agents}

    cfg = VDN_DEFAULT_CONFIG.copy()
    cfg["batch_size"] = 512
    cfg["learning_starts"] = 100
    cfg["update_interval"] = 2  # one gradient step per 2 x num_envs env steps
    cfg["discount_factor"] = 0.99
    cfg["polyak"] = 0.005
    cfg["learning_rate"] = 5e-4
    cfg["grad_norm_clip"] = 10.0
    cfg["team_reward"] = "sum"
    cfg["n_step"] = 5  # sparse rewards: 5-step returns carry a loaded food's reward back sooner
    cfg["exploration"] = {"initial_epsilon": 1.0, "final_epsilon": 0.05, "timesteps": 12_500}  # 200k env steps
    cfg["experiment"]["directory"] = directory
    cfg.update(overrides)
    replay_steps = 500_000 // env.num_envs  # half a million transitions per agent
    memories = {uid: RandomMemory(memory_size=replay_steps, num_envs=env.num_envs) for uid in env.possible_agents}
    return VDN(possible_agents=env.possible_agents, models=models, memories=memories,
               observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
               device=env.device, cfg=cfg)


def parse_arguments() -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default=TASK, help="the LBF task's Gymnasium id")
    parser.add_argument("--timesteps", type=int, default=TIMESTEPS, help="env steps to train for (all copies counted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS, help="env copies stepped together")
    parser.add_argument("--workers", type=int, default=0, help="worker processes for the env copies (0: none)")
    parser.add_argument("--directory", default=DIRECTORY, help="where TensorBoard logs and checkpoints go")
    parser.add_argument("--checkpoint", help="load this checkpoint first: training resumes from it")
    parser.add_argument("--eval", action="store_true", help="only evaluate the agent of --checkpoint, no training")
    parser.add_argument("--episodes", type=int, default=100, help="evaluation episodes")
    return parser.parse_args()


def main() -> None:
    """Train (or resume, or only evaluate), save the agent, and print its greedy evaluation."""
    args = parse_arguments()
    if args.eval and not args.checkpoint:
        raise SystemExit("--eval evaluates a saved agent: give its file with --checkpoint")
    set_seed(args.seed)
    env = make_env(args.env, args.num_envs, args.workers, args.seed)
    agent = make_agent(env, args.directory)
    if args.checkpoint:
        agent.load(args.checkpoint)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={
        "timesteps": args.timesteps // env.num_envs,
        "eval_interval": EVAL_INTERVAL // env.num_envs,  # greedy evaluation: keeps best_agent.pt
        "eval_episodes": args.episodes,
    })
    if not args.eval:
        began = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - began
        steps = trainer.cfg["timesteps"] * env.num_envs
        checkpoint = os.path.join(agent.experiment_dir, "checkpoints", "final_agent.pt")
        agent.save(checkpoint)
        print(f"trained {steps} env steps on 1 rank(s) in {seconds:.2f} s: {steps / seconds:.0f} env steps per second")
        print(f"checkpoint: {checkpoint}")
    result = trainer.eval()
    total = sum(result["returns"].values())
    print(f"greedy evaluation over {result['episodes']} episodes: mean return {result['mean_return']:.3f}, "
          f"total over the agents {total:.3f} (of 1 when all food is collected)")
    env.close()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
