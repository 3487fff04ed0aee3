"""MAPPO with shared parameters on the Multi-Robot Warehouse (``rware``), a Gymnasium multi-agent env.

Robots that see only their neighbourhood carry requested shelves to the goal and back; an agent is
rewarded 1 for each requested shelf it delivers, and the team return reported here is the shelves
delivered per episode, summed over the agents (as in EPyMARL). Rewards are sparse: random actions
deliver almost nothing. Episodes last 500 steps (a truncation, bootstrapped).

One policy for every agent and one centralised critic on all observations concatenated, one value per
agent. ``--env`` picks the task, e.g. ``rware-small-4ag-v2``. EPyMARL's protocol, with fewer
evaluations for the 500-step episodes: ``--evaluations`` evaluations at equal intervals from the start
to the end of training (21 by default), each of ``--episodes`` episodes (16) with sampled and with
greedy actions, appended to ``evaluations.jsonl`` in the experiment folder. Run
``python examples/rware/warehouse_mappo.py --help`` for the options.
"""

import argparse
import os
import time

import gymnasium
import rware  # noqa: F401  (registers the rware-* envs)
import torch

from marlparts.agents import MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, DeterministicMixin, Model, mlp
from marlparts.resources import RunningStandardScaler
from marlparts.trainers import SequentialTrainer
from marlparts.utils import set_seed
from marlparts.utils.run_folders import checkpoint_to_resume

TASK = "rware-tiny-2ag-v2"
NUM_ENVS = 16  # env copies stepped together
TIMESTEPS = 4_000_000  # env steps of training (all copies counted): a tenth of EPyMARL's on-policy budget
EVALUATIONS = 21  # evaluations from the start to the end of training (EPyMARL: 41; its episodes are long here)
MAX_STEPS = 500  # steps per episode (RWARE's and EPyMARL's)
DIRECTORY = "runs/rware_mappo"


class Policy(CategoricalMixin, Model):
    """An MLP that outputs the logits of a categorical policy."""

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


def make_env(task: str = TASK, num_envs: int = NUM_ENVS, workers: int = 0, seed: int = 0,
             max_steps: int = MAX_STEPS) -> MultiAgentEnv:
    """``num_envs`` copies of the RWARE ``task`` with episodes of ``max_steps``; the global state is every
    observation concatenated.
    """
    return wrap_env(lambda: gymnasium.make(task, disable_env_checker=True, max_steps=max_steps), num_envs=num_envs,
                    workers=workers, seed=seed)


def make_agent(env: MultiAgentEnv, directory: str = DIRECTORY, **overrides) -> MAPPO:
    """MAPPO with one shared policy and one shared critic for every agent of ``env``."""
    policy = Policy(observation_space=env.observation_space(env.possible_agents[0]),
                    action_space=env.action_space(env.possible_agents[0]))
    value = Value(observation_space=env.state_space, output_size=env.num_agents)  # one value per agent
    models = {uid: {"policy": policy, "value": value} for uid in env.possible_agents}

    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg["rollouts"] = 100  # a fifth of a 500-step episode per update, the rest bootstrapped
    cfg["learning_epochs"] = 5
    cfg["mini_batches"] = 4
    cfg["learning_rate"] = 5e-4
    cfg["discount_factor"] = 0.99
    cfg["observation_preprocessor"] = RunningStandardScaler
    cfg["state_preprocessor"] = RunningStandardScaler
    cfg["experiment"]["directory"] = directory
    cfg.update(overrides)
    memories = {uid: RandomMemory(memory_size=cfg["rollouts"], num_envs=env.num_envs) for uid in env.possible_agents}
    return MAPPO(possible_agents=env.possible_agents, models=models, memories=memories,
                 observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                 state_spaces=env.state_spaces, device=env.device, cfg=cfg)


def parse_arguments() -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default=TASK, help="the RWARE task's Gymnasium id")
    parser.add_argument("--timesteps", type=int, default=TIMESTEPS, help="env steps to train for (all copies counted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS, help="env copies stepped together")
    parser.add_argument("--workers", type=int, default=0, help="worker processes for the env copies (0: none)")
    parser.add_argument("--max-steps", type=int, default=MAX_STEPS, help="steps per episode")
    parser.add_argument("--directory", default=DIRECTORY, help="where TensorBoard logs and checkpoints go")
    parser.add_argument("--evaluations", type=int, default=EVALUATIONS,
                        help="evaluations over the run, the first before training (0: only one at the end)")
    parser.add_argument("--episodes", type=int, default=16, help="episodes of each evaluation (each kind of action)")
    parser.add_argument("--checkpoint", help="load this checkpoint first: training resumes from it")
    parser.add_argument("--resume", action="store_true",
                        help="go on from the newest checkpoint under --directory, if there is one (a run cut short; "
                             "a checkpoint is written at every evaluation): give each run a directory of its own")
    parser.add_argument("--eval", action="store_true", help="only evaluate the agent of --checkpoint, no training")
    return parser.parse_args()


def main() -> None:
    """Train (or resume, or only evaluate), save the agent, and print its evaluation with sampled and greedy
    actions.
    """
    args = parse_arguments()
    if args.resume and not args.checkpoint:  # None: nothing to go on from, a fresh start
        settings = {"env": args.env, "seed": args.seed, "timesteps": args.timesteps, "num_envs": args.num_envs,
                    "evaluations": args.evaluations, "episodes": args.episodes, "max_steps": args.max_steps}
        args.checkpoint = checkpoint_to_resume(args.directory, settings)
    if args.eval and not args.checkpoint:
        raise SystemExit("--eval evaluates a saved agent: give its file with --checkpoint")
    if args.evaluations == 1 or args.evaluations < 0:
        raise SystemExit("--evaluations must be 0 or at least 2 (one before training, one at its end)")
    set_seed(args.seed)
    env = make_env(args.env, args.num_envs, args.workers, args.seed, args.max_steps)
    steps = max(args.timesteps // env.num_envs, 1)  # vectorized steps
    interval = max(steps // (args.evaluations - 1), 1) if args.evaluations else 0
    steps = interval * (args.evaluations - 1) if args.evaluations else steps  # evaluations at equal intervals
    agent = make_agent(env, args.directory)
    if args.checkpoint:
        agent.load(args.checkpoint)  # a resumed run trains what is left of its budget
    trainer = SequentialTrainer(env=env, agents=agent, cfg={
        "timesteps": max(steps - agent.timestep, 0), "eval_interval": interval, "eval_at_start": True,
        "checkpoint_at_eval": True,  # a run cut short goes on from its last evaluation (--resume)
        "eval_episodes": args.episodes,
        "team_return": "sum",  # the team's deliveries: returns summed over the agents
    })
    if not args.eval:
        began = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - began
        checkpoint = os.path.join(agent.experiment_dir, "checkpoints", "final_agent.pt")
        agent.save(checkpoint)
        trained = trainer.cfg["timesteps"] * env.num_envs
        print(f"trained {trained} env steps in {seconds:.2f} s: {trained / max(seconds, 1e-9):.0f} env steps per second")
        print(f"checkpoint: {checkpoint}")
    result = trainer.eval()
    print(f"evaluation over {result['episodes']} episodes, shelves delivered per episode by the team: "
          f"sampled actions {result['sampled']['mean_return']:.3f}, greedy {result['greedy']['mean_return']:.3f}")
    env.close()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
