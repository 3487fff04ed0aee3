"""IPPO with shared parameters on VMAS navigation (3 agents by default each drive to their own goal, avoiding
each other, seen through lidar; 100 steps), with discrete actions.

Every copy is stepped as one batch of tensors on ``--device``; one categorical policy and one critic, shared by
every agent. Each agent is rewarded for its own progress to its goal (with ``shared_rew=False``) and penalised
for collisions. The networks (``--model``) are MLPs on the agent's own observation, or networks over all the
agents of a copy, whose parameters do not depend on how many there are: a graph neural network (``gnn``, its
edges carrying the agents' relative positions; needs ``pip install "marlparts[graphs]"``) or a DeepSets network
(``deepsets``). A checkpoint trained with one ``--agents`` evaluates with another. Run
``python examples/vmas/navigation_ippo.py --help`` for the options (needs ``pip install "marlparts[vmas]"``).
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

from marlparts.agents import IPPO, IPPO_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import AgentGraph, CategoricalMixin, DeepSets, DeterministicMixin, Model, mlp
from marlparts.resources import RunningStandardScaler
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed

NUM_AGENTS = 3
NUM_ENVS = 512  # env copies stepped together
TIMESTEPS = 5_000_000  # env steps of training (all copies counted)
EVAL_INTERVAL = 1_000_000  # env steps between greedy evaluations
DIRECTORY = "runs/vmas_navigation_ippo"
POSITION = (0, 2)  # the columns of a navigation observation that hold the agent's position
MODELS = ("mlp", "gnn", "deepsets")


def network(model: str, inputs: int, outputs: int, output_gain: float = 1.0) -> torch.nn.Module:
    """The network of kind ``model`` (one of :data:`MODELS`) from ``inputs`` features of an agent to ``outputs``."""
    if model == "gnn":
        return AgentGraph(inputs, outputs, hidden_size=32, position_features=POSITION, output_gain=output_gain)
    if model == "deepsets":
        return DeepSets(inputs, outputs, hidden_size=64, output_gain=output_gain)
    return mlp(inputs, outputs, hidden_sizes=(64, 64), output_gain=output_gain)


class Policy(CategoricalMixin, Model):
    """A network that outputs the logits of a categorical policy."""

    def __init__(self, *, model: str = "mlp", **kwargs):
        super().__init__(**kwargs)
        self.net = network(model, self.num_observations, self.num_actions, output_gain=0.01)

    def compute(self, inputs, role=""):
        """Logits for ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    """A network from the agents' observations to each agent's value."""

    def __init__(self, *, model: str = "mlp", **kwargs):
        super().__init__(**kwargs)
        self.net = network(model, self.num_observations, self.num_outputs)

    def compute(self, inputs, role=""):
        """Value of ``inputs["observations"]``."""
        return self.net(inputs["observations"]), {}


def make_env(num_envs: int = NUM_ENVS, seed: int = 0, device: str = "cpu", agents: int = NUM_AGENTS) -> MultiAgentEnv:
    """VMAS navigation, ``agents`` agents, 100 steps, discrete actions, own rewards, as ``num_envs`` copies on
    ``device``.
    """
    factory = functools.partial(vmas.make_env, "navigation", device=device, continuous_actions=False, max_steps=100,
                                terminated_truncated=True, n_agents=agents, shared_rew=False)
    return wrap_env(factory, num_envs=num_envs, seed=seed)


def make_agent(env: MultiAgentEnv, directory: str = DIRECTORY, model: str = "mlp", **overrides) -> IPPO:
    """IPPO with one policy and one critic, networks of kind ``model``, shared by every agent of ``env``."""
    policy = Policy(model=model, observation_space=env.observation_space(env.possible_agents[0]),
                    action_space=env.action_space(env.possible_agents[0]))
    value = Value(model=model, observation_space=env.observation_space(env.possible_agents[0]))
    models = {uid: {"policy": policy, "value": value} for uid in env.possible_agents}

    cfg = IPPO_DEFAULT_CONFIG.copy()
    cfg["rollouts"] = 32  # 512 x 32 = 16384 env steps per update
    cfg["learning_epochs"] = 2
    cfg["mini_batches"] = 2
    cfg["value_min_steps"] = 4  # the critic's steps are the epochs' 4: its learning figures were measured so
    cfg["learning_rate"] = 5e-4
    cfg["discount_factor"] = 0.99
    cfg["gae_lambda"] = 0.95
    cfg["observation_preprocessor"] = RunningStandardScaler
    cfg["state_preprocessor"] = RunningStandardScaler
    cfg["experiment"]["directory"] = directory
    cfg.update(overrides)
    memories = {uid: RandomMemory(memory_size=cfg["rollouts"], num_envs=env.num_envs) for uid in env.possible_agents}
    return IPPO(possible_agents=env.possible_agents, models=models, memories=memories,
                observation_spaces=env.observation_spaces, action_spaces=env.action_spaces, device=env.device, cfg=cfg)


def parse_arguments() -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=TIMESTEPS, help="env steps to train for (all copies counted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS, help="env copies stepped together")
    parser.add_argument("--agents", type=int, default=NUM_AGENTS, help="agents in each copy")
    parser.add_argument("--model", choices=MODELS, default="mlp",
                        help="the networks: an MLP on the agent's own observation, or a graph or DeepSets network "
                             "over every agent of the copy (a checkpoint of any of them runs with another --agents)")
    parser.add_argument("--device", default="cpu", help="where the env, models and updates live (cpu, cuda, ...)")
    parser.add_argument("--directory", default=DIRECTORY, help="where TensorBoard logs and checkpoints go")
    parser.add_argument("--checkpoint", help="load this checkpoint first: training resumes from it (with another "
                                                 "--agents, a new run starts from its models)")
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
    env = make_env(args.num_envs, args.seed, device=args.device, agents=args.agents)
    agent = make_agent(env, args.directory, model=args.model)
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
    print(f"greedy evaluation over {result['episodes']} episodes: mean return {result['mean_return']:.2f}")
    env.close()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
