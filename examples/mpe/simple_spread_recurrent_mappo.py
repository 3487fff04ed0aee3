"""Recurrent MAPPO on MPE simple_spread with the agents' velocities removed from their observations.

Without its velocity an agent cannot tell from one observation where it is heading; a GRU
policy can, from the observations it has seen. One recurrent policy for every agent, trained on
chunks of consecutive steps, and one feed-forward centralised critic on the global state (every
agent's velocity-less observation) with one value per agent. ``--feed-forward`` trains the same
task with a feed-forward policy, for comparison.
Run ``python examples/mpe/simple_spread_recurrent_mappo.py --help`` for the options.
"""

import argparse
import os
import time
from typing import Optional

import gymnasium
import torch
from mpe2 import simple_spread_v3
from pettingzoo.utils.wrappers import BaseParallelWrapper

from marlparts.agents import MAPPO, RecurrentMAPPO
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, RecurrentMixin, mlp
from marlparts.resources import RunningStandardScaler
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed
from marlparts.utils.distributed import init_distributed, is_main_process, local_device

NUM_ENVS = 64  # env copies stepped together
TIMESTEPS = 1_000_000  # env steps of training (all copies counted)
EVAL_INTERVAL = 100_000  # env steps between greedy evaluations
DIRECTORY = "runs/simple_spread_recurrent_mappo"
SEQUENCE_LENGTH = 5  # steps per training chunk (a divisor of the rollout's 25)


class WithoutVelocity(BaseParallelWrapper):
    """simple_spread with the first two observation values (the agent's own velocity) removed."""

    def observation_space(self, agent):
        """The observation space without the velocity."""
        space = self.env.observation_space(agent)
        return gymnasium.spaces.Box(space.low[2:], space.high[2:], dtype=space.dtype)

    def reset(self, seed=None, options=None):
        """Reset; observations without the velocity."""
        observations, infos = self.env.reset(seed=seed, options=options)
        return {agent: obs[2:] for agent, obs in observations.items()}, infos

    def step(self, actions):
        """Step; observations without the velocity."""
        observations, rewards, terminated, truncated, infos = self.env.step(actions)
        return {agent: obs[2:] for agent, obs in observations.items()}, rewards, terminated, truncated, infos


class RecurrentPolicy(RecurrentMixin, CategoricalMixin, Model):
    """An MLP encoder, a GRU cell and a linear head giving the logits of a categorical policy."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = 64
        self.encoder = mlp(self.num_observations, 64, hidden_sizes=(64,))
        self.cell = torch.nn.GRUCell(64, self.hidden_size)
        self.head = mlp(self.hidden_size, self.num_actions, hidden_sizes=(), output_gain=0.01)

    def compute(self, inputs, role=""):
        """Logits, and the next hidden state, from ``inputs["observations"]`` and ``inputs["hidden"]``."""
        output, hidden = self.recur(self.cell, torch.tanh(self.encoder(inputs["observations"])), inputs)
        return self.head(output), {"hidden": hidden}


class Policy(CategoricalMixin, Model):
    """A feed-forward MLP that outputs the logits of a categorical policy (for ``--feed-forward``)."""

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
        """Value of ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


def make_env(num_envs: int = NUM_ENVS, workers: int = 0, seed: int = 0, device: str = "cpu",
             render_mode: Optional[str] = None) -> MultiAgentEnv:
    """simple_spread_v3 (N=3, max_cycles=25, local_ratio=0.5) without velocities, as ``num_envs`` copies."""
    return wrap_env(lambda: WithoutVelocity(simple_spread_v3.parallel_env(N=3, max_cycles=25, local_ratio=0.5,
                                                                          render_mode=render_mode)),
                    num_envs=num_envs, workers=workers, seed=seed, device=device, state_source="observations")


def make_agent(env: MultiAgentEnv, directory: str = DIRECTORY, recurrent: bool = True, **overrides) -> MAPPO:
    """RecurrentMAPPO with one recurrent policy and one critic shared by every agent (MAPPO with a feed-forward
    policy if ``recurrent`` is False).
    """
    uid = env.possible_agents[0]
    policy = (RecurrentPolicy if recurrent else Policy)(observation_space=env.observation_space(uid),
                                                        action_space=env.action_space(uid))
    value = Value(observation_space=env.state_space, output_size=env.num_agents)  # one value per agent
    models = {uid: {"policy": policy, "value": value} for uid in env.possible_agents}

    algorithm = RecurrentMAPPO if recurrent else MAPPO
    cfg = algorithm.DEFAULT_CONFIG.copy()
    cfg["rollouts"] = 25  # one whole episode of every copy per update
    if recurrent:
        cfg["sequence_length"] = SEQUENCE_LENGTH
    cfg["learning_epochs"] = 10
    cfg["mini_batches"] = 4
    cfg["learning_rate"] = 7e-4
    cfg["observation_preprocessor"] = RunningStandardScaler
    cfg["state_preprocessor"] = RunningStandardScaler
    cfg["experiment"]["directory"] = directory
    cfg.update(overrides)
    memories = {uid: RandomMemory(memory_size=cfg["rollouts"], num_envs=env.num_envs) for uid in env.possible_agents}
    return algorithm(possible_agents=env.possible_agents, models=models, memories=memories,
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
    parser.add_argument("--feed-forward", action="store_true", help="a feed-forward policy instead of the recurrent one")
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
    agent = make_agent(env, args.directory, recurrent=not args.feed_forward)
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
