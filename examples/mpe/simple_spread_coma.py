"""COMA on MPE simple_spread (3 agents, 3 landmarks): counterfactual multi-agent policy gradients.

One policy shared by every agent, and one centralised critic that reads the global state, the other
agents' actions and the valued agent's id, and outputs a value for each of that agent's actions. Each
agent's advantage is the value of its action less the value its own policy expects (the counterfactual
baseline). Run ``python examples/mpe/simple_spread_coma.py --help`` for the options.
"""

import argparse
import os
import time
from typing import Optional

import gymnasium
import torch
from mpe2 import simple_spread_v3

from marlparts.agents import COMA, COMA_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, mlp
from marlparts.resources import RunningStandardScaler
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed
from marlparts.utils.distributed import init_distributed, is_main_process, local_device
from marlparts.utils.spaces import joint_space

NUM_ENVS = 64  # env copies stepped together
TIMESTEPS = 1_000_000  # env steps of training (all copies counted)
EVAL_INTERVAL = 100_000  # env steps between greedy evaluations
DIRECTORY = "runs/simple_spread_coma"


class Policy(CategoricalMixin, Model):
    """An MLP that outputs the logits of a categorical policy."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(64, 64), output_gain=0.01)

    def compute(self, inputs, role=""):
        """Logits for ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


class Critic(DeterministicMixin, Model):
    """An MLP from the state, the other agents' actions and the agent's id to a value of each of its actions."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(128, 128))

    def compute(self, inputs, role=""):
        """Values of ``inputs["observations"]``, one per action."""
        return self.net(inputs["observations"]), {}


def make_env(num_envs: int = NUM_ENVS, workers: int = 0, seed: int = 0, continuous: bool = False,
             device: str = "cpu",
             render_mode: Optional[str] = None) -> MultiAgentEnv:
    """simple_spread_v3 with N=3, max_cycles=25, local_ratio=0.5 as ``num_envs`` copies, tensors on ``device``
    (``render_mode="rgb_array"`` for evaluation videos).
    """
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25, local_ratio=0.5,
                                                          continuous_actions=continuous, render_mode=render_mode),
                    num_envs=num_envs, workers=workers, seed=seed, device=device,
                    state_source="observations")  # equals mpe2's state(), without recomputing it


def make_agent(env: MultiAgentEnv, directory: str = DIRECTORY, **overrides) -> COMA:
    """COMA with one shared policy and the centralised critic for every agent of ``env``."""
    uid = env.possible_agents[0]
    policy = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    # the critic's input: the global state, every agent's action one-hot, the agent's one-hot id
    critic_space = joint_space([env.state_space, *[gymnasium.spaces.MultiBinary(int(env.action_space(u).n))
                                                   for u in env.possible_agents],
                                gymnasium.spaces.MultiBinary(env.num_agents)])
    critic = Critic(observation_space=critic_space, output_size=int(env.action_space(uid).n))
    models = {uid: {"policy": policy, "value": critic} for uid in env.possible_agents}

    cfg = COMA_DEFAULT_CONFIG.copy()
    cfg["rollouts"] = 25  # one whole episode of every copy per update: 64 x 25 = 1600 env steps
    cfg["learning_epochs"] = 5  # the critic's passes over the rollout; the actor takes one
    cfg["mini_batches"] = 4
    cfg["learning_rate"] = 1e-3
    cfg["discount_factor"] = 0.95  # 25-step episodes: a shorter horizon learns to cover the landmarks much sooner
    cfg["gae_lambda"] = 0.8  # TD(lambda) of the critic's targets
    cfg["observation_preprocessor"] = RunningStandardScaler
    cfg["state_preprocessor"] = RunningStandardScaler
    cfg["experiment"]["directory"] = directory
    cfg.update(overrides)
    memories = {uid: RandomMemory(memory_size=cfg["rollouts"], num_envs=env.num_envs) for uid in env.possible_agents}
    return COMA(possible_agents=env.possible_agents, models=models, memories=memories,
                observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                state_spaces=env.state_spaces, device=env.device, cfg=cfg)


def parse_arguments() -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=TIMESTEPS, help="env steps to train for (all copies counted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS, help="env copies stepped together")
    parser.add_argument("--workers", type=int, default=0, help="worker processes for the env copies (0: none)")
    parser.add_argument("--device", default="cpu", help="where tensors, models and updates live (cpu, cuda, ...)")
    parser.add_argument("--directory", default=DIRECTORY, help="where TensorBoard logs and checkpoints go")
    parser.add_argument("--checkpoint", help="load this checkpoint first: training resumes from it")
    parser.add_argument("--eval", action="store_true", help="only evaluate the agent of --checkpoint, no training")
    parser.add_argument("--episodes", type=int, default=100, help="evaluation episodes")
    parser.add_argument("--video", action="store_true", help="record evaluation videos in the experiment folder")
    return parser.parse_args()


def main() -> None:
    """Train (or resume, or only evaluate), save the agent, and print its greedy evaluation.

    Started with ``torchrun --nproc_per_node=N``, it trains with N data-parallel ranks: each steps
    its own ``--num-envs`` copies, and ``--timesteps`` counts the env steps of all ranks together.
    """
    args = parse_arguments()
    if args.eval and not args.checkpoint:
        raise SystemExit("--eval evaluates a saved agent: give its file with --checkpoint")
    _, world_size = init_distributed(device=args.device)
    set_seed(args.seed)
    device = local_device() if args.device == "cuda" and world_size > 1 else args.device
    env = make_env(args.num_envs, args.workers, args.seed, device=device,
                   render_mode="rgb_array" if args.video else None)
    agent = make_agent(env, args.directory)
    if args.checkpoint:
        agent.load(args.checkpoint)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={
        "timesteps": args.timesteps // (env.num_envs * world_size),
        "eval_interval": EVAL_INTERVAL // (env.num_envs * world_size),  # greedy evaluation: keeps best_agent.pt
        "eval_episodes": args.episodes,
        "eval_video": args.video,
    })
    if not args.eval:
        began = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - began
        steps = trainer.cfg["timesteps"] * env.num_envs * world_size
        if is_main_process():
            checkpoint = os.path.join(agent.experiment_dir, "checkpoints", "final_agent.pt")
            agent.save(checkpoint)
            print(f"trained {steps} env steps on {world_size} rank(s) in {seconds:.2f} s: "
                  f"{steps / seconds:.0f} env steps per second")
            print(f"checkpoint: {checkpoint}")
    result = trainer.eval()
    if is_main_process():
        per_agent = ", ".join(f"{uid} {value:.2f}" for uid, value in result["returns"].items())
        print(f"greedy evaluation over {result['episodes']} episodes: mean return {result['mean_return']:.2f} "
              f"(per agent: {per_agent})")
    env.close()

if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
