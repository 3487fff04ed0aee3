"""MAPPO with shared parameters on VMAS balance (3 agents carry a package on a line to a goal, 100 steps).

Every copy is stepped as one batch of tensors on ``--device``; one Gaussian policy for every agent and one
centralised critic on all observations. The shared reward of VMAS's own ``HeuristicPolicy`` for this task is
about +11 per episode, random actions about -9. Run ``python examples/vmas/balance_mappo.py --help`` for the
options (needs ``pip install "marlparts[vmas]"``).
"""

import argparse
import functools
import os
import time

import torch

try:
    import vmas
except ImportError as error:  # pragma: no cover - depends on the optional extra
    raise SystemExit('this example needs VMAS: pip install "marlparts[vmas]"') from error

from marlparts.agents import MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import DeterministicMixin, GaussianMixin, Model, mlp
from marlparts.resources import RunningStandardScaler
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed

NUM_ENVS = 512  # env copies stepped together
TIMESTEPS = 10_000_000  # env steps of training (all copies counted)
EVAL_INTERVAL = 1_000_000  # env steps between greedy evaluations
DIRECTORY = "runs/vmas_balance_mappo"


class Policy(GaussianMixin, Model):
    """An MLP that outputs the mean of a Gaussian policy, with a learned log standard deviation."""

    clip_actions = True  # VMAS rejects forces outside the action space

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(64, 64), output_gain=0.01)
        self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

    def compute(self, inputs, role=""):
        """The mean action for ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    """An MLP from the global state to one value per agent."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_outputs, hidden_sizes=(64, 64))

    def compute(self, inputs, role=""):
        """Value of ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


def make_env(num_envs: int = NUM_ENVS, seed: int = 0, device: str = "cpu") -> MultiAgentEnv:
    """VMAS balance, 3 agents, 100 steps, continuous actions, as ``num_envs`` copies on ``device``."""
    factory = functools.partial(vmas.make_env, "balance", device=device, continuous_actions=True, max_steps=100,
                                terminated_truncated=True, n_agents=3)
    # balance draws every copy's start on its own and keeps its state in batched tensors: a copy that ends may
    # start from the fresh row the last reset drew for it (docs/batched_simulators.rst, "Fresh rows kept")
    return wrap_env(factory, num_envs=num_envs, seed=seed, pooled_reset=True)


def make_agent(env: MultiAgentEnv, directory: str = DIRECTORY, **overrides) -> MAPPO:
    """MAPPO with one shared policy and one shared critic for every agent of ``env``."""
    policy = Policy(observation_space=env.observation_space(env.possible_agents[0]),
                    action_space=env.action_space(env.possible_agents[0]))
    value = Value(observation_space=env.state_space, output_size=env.num_agents)
    models = {uid: {"policy": policy, "value": value} for uid in env.possible_agents}

    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg["rollouts"] = 32  # 512 x 32 = 16384 env steps per update
    cfg["learning_epochs"] = 2
    cfg["mini_batches"] = 2
    cfg["value_min_steps"] = 4  # the critic's steps are the epochs' 4: its learning figures were measured so
    cfg["learning_rate"] = 5e-4
    cfg["discount_factor"] = 0.99
    cfg["gae_lambda"] = 0.95
    cfg["observation_preprocessor"] = RunningStandardScaler
    cfg["state_preprocessor"] = RunningStandardScaler
    # a running scaler of the returns rather than the default PopArt: at 100k env steps (128 copies, seeds 0-5)
    # it reached a greedy return of 34-39 on every seed, PopArt 6.6-36 (below 16 on three); benchmarks/README.md
    cfg["value_preprocessor"] = RunningStandardScaler
    cfg["experiment"]["directory"] = directory
    cfg.update(overrides)
    memories = {uid: RandomMemory(memory_size=cfg["rollouts"], num_envs=env.num_envs) for uid in env.possible_agents}
    return MAPPO(possible_agents=env.possible_agents, models=models, memories=memories,
                 observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                 state_spaces=env.state_spaces, device=env.device, cfg=cfg)


def parse_arguments() -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=TIMESTEPS, help="env steps to train for (all copies counted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS, help="env copies stepped together")
    parser.add_argument("--device", default="cpu", help="where the env, models and updates live (cpu, cuda, ...)")
    parser.add_argument("--directory", default=DIRECTORY, help="where TensorBoard logs and checkpoints go")
    parser.add_argument("--checkpoint", help="load this checkpoint first: training resumes from it")
    parser.add_argument("--eval", action="store_true", help="only evaluate the agent of --checkpoint, no training")
    parser.add_argument("--episodes", type=int, default=512, help="evaluation episodes")
    parser.add_argument("--video", action="store_true", help="record evaluation videos in the experiment folder")
    return parser.parse_args()


def main() -> None:
    """Train (or resume, or only evaluate), save the agent, and print its greedy evaluation."""
    args = parse_arguments()
    if args.eval and not args.checkpoint:
        raise SystemExit("--eval evaluates a saved agent: give its file with --checkpoint")
    set_seed(args.seed)
    env = make_env(args.num_envs, args.seed, device=args.device)
    agent = make_agent(env, args.directory)
    if args.checkpoint:
        agent.load(args.checkpoint)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={
        "timesteps": args.timesteps // env.num_envs,
        "eval_interval": EVAL_INTERVAL // env.num_envs,  # greedy evaluation: keeps best_agent.pt
        "eval_episodes": args.episodes,
        "eval_video": args.video,
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
    print(f"greedy evaluation over {result['episodes']} episodes: mean return {result['mean_return']:.2f} "
          f"(shared reward; VMAS's heuristic about +11, random actions about -9)")
    env.close()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
