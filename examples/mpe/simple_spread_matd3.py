"""MATD3 with shared parameters on MPE simple_spread (3 agents, 3 landmarks).

One deterministic policy for every agent and two centralised critics (twins) that read every
agent's observation and action and output one Q-value per agent. MATD3 is a small subclass
of MADDPG: the target takes the smaller twin, target actions get clipped noise, and the
actors move every second critic step. Continuous actions by default; ``--discrete`` uses the
discrete task with Gumbel-softmax.
Run ``python examples/mpe/simple_spread_matd3.py --help`` for the options.
"""

import argparse
import os
import time
from typing import Optional

import torch
from mpe2 import simple_spread_v3

from marlparts.agents import MATD3, MATD3_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import DeterministicMixin, Model, mlp
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed
from marlparts.utils.distributed import init_distributed, is_main_process, local_device
from marlparts.utils.spaces import is_discrete, joint_space

NUM_ENVS = 16  # env copies stepped together
TIMESTEPS = 2_000_000  # env steps of training (all copies counted)
EVAL_INTERVAL = 200_000  # env steps between greedy evaluations
DIRECTORY = "runs/simple_spread_matd3"


class Policy(DeterministicMixin, Model):
    """An MLP that outputs logits (discrete actions) or actions squashed into the Box (continuous)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(64, 64), activation=torch.nn.ReLU,
                       output_gain=0.01)
        self.discrete = is_discrete(self.action_space)
        if not self.discrete:
            self.register_buffer("low", torch.as_tensor(self.action_space.low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(self.action_space.high, dtype=torch.float32))

    def compute(self, inputs, role=""):
        """Logits, or actions between the Box bounds."""
        output = self.net(inputs["observations"])
        if self.discrete:
            return output, {}
        return self.low + (self.high - self.low) * torch.sigmoid(output), {}


class Critic(DeterministicMixin, Model):
    """An MLP from every agent's observation and action to one Q-value per agent."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(64, 64), activation=torch.nn.ReLU)

    def compute(self, inputs, role=""):
        """Q-values for ``inputs["observations"]`` (observations and actions concatenated)."""
        return self.net(inputs["observations"]), {}


def make_env(num_envs: int = NUM_ENVS, workers: int = 0, seed: int = 0, discrete: bool = False,
             device: str = "cpu",
             render_mode: Optional[str] = None) -> MultiAgentEnv:
    """simple_spread_v3 with N=3, max_cycles=25, local_ratio=0.5 as ``num_envs`` copies, tensors on ``device``
    (``render_mode="rgb_array"`` for evaluation videos).
    """
    return wrap_env(lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25, local_ratio=0.5,
                                                          continuous_actions=not discrete, render_mode=render_mode),
                    num_envs=num_envs, workers=workers, seed=seed, device=device,
                    state_source="observations")  # equals mpe2's state(), without recomputing it


def make_agent(env: MultiAgentEnv, directory: str = DIRECTORY, **overrides) -> MATD3:
    """MATD3 with one policy and two critics (twins) shared by every agent of ``env``."""
    uid = env.possible_agents[0]
    policy = Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    critic_space = joint_space([*env.observation_spaces.values(), *env.action_spaces.values()])
    critic, critic_2 = (Critic(observation_space=critic_space, output_size=env.num_agents) for _ in range(2))
    models = {uid: {"policy": policy, "critic": critic, "critic_2": critic_2} for uid in env.possible_agents}

    cfg = MATD3_DEFAULT_CONFIG.copy()
    cfg["batch_size"] = 1024
    cfg["learning_starts"] = 100
    cfg["update_interval"] = 4  # one gradient step per 4 x num_envs env steps (the paper: one per 100 samples)
    cfg["discount_factor"] = 0.95
    cfg["polyak"] = 0.01
    cfg["actor_learning_rate"] = 1e-3
    cfg["critic_learning_rate"] = 1e-3
    cfg["exploration"]["noise_kwargs"] = {"std": 0.1}
    cfg["experiment"]["directory"] = directory
    cfg.update(overrides)
    replay_steps = 500_000 // env.num_envs  # half a million transitions per agent
    memories = {uid: RandomMemory(memory_size=replay_steps, num_envs=env.num_envs) for uid in env.possible_agents}
    return MATD3(possible_agents=env.possible_agents, models=models, memories=memories,
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
    parser.add_argument("--discrete", action="store_true", help="discrete actions through Gumbel-softmax")
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
    env = make_env(args.num_envs, args.workers, args.seed, device=device, discrete=args.discrete,
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
