"""What every MPE example shares: its command-line options and its train, save, evaluate ending."""

import argparse

from marlparts.agents import MultiAgent
from marlparts.envs import MultiAgentEnv
from marlparts.trainers import SequentialTrainer


def parse_arguments(description: str, *, timesteps: int, directory: str, num_envs: int,
                    discrete_flag: bool = False) -> argparse.Namespace:
    """``--timesteps`` (env steps, all copies counted), ``--seed``, ``--num-envs``, ``--workers``, ``--directory``
    ``--device`` (and ``--discrete`` when asked).
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--timesteps", type=int, default=timesteps, help="env steps (all copies counted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=num_envs, help="env copies stepped together")
    parser.add_argument("--workers", type=int, default=0, help="worker processes for the env copies (0: none)")
    parser.add_argument("--device", default="cpu", help="where tensors, models and updates live (cpu, cuda, ...)")
    parser.add_argument("--directory", default=directory, help="where TensorBoard logs and checkpoints go")
    if discrete_flag:
        parser.add_argument("--discrete", action="store_true", help="discrete actions through Gumbel-softmax")
    return parser.parse_args()


def train_save_evaluate(env: MultiAgentEnv, agent: MultiAgent, timesteps: int) -> dict:
    """Train for ``timesteps`` env steps, save ``final_agent.pt``, print and return the greedy evaluation."""
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": timesteps // env.num_envs})
    trainer.train()
    checkpoint = f"{agent.experiment_dir}/checkpoints/final_agent.pt"
    agent.save(checkpoint)
    result = trainer.eval(episodes=100)
    per_agent = ", ".join(f"{uid} {value:.2f}" for uid, value in result["returns"].items())
    print(f"greedy evaluation over {result['episodes']} episodes: mean return {result['mean_return']:.2f} "
          f"(per agent: {per_agent})")
    print(f"checkpoint: {checkpoint}")
    env.close()
    return result
