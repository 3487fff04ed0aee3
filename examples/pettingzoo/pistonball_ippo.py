"""IPPO on pixels: butterfly ``pistonball_v6``, 20 pistons, one CNN with a policy head and a value head.

Twenty pistons move a ball to the left wall; each sees the frame around itself and is rewarded for the
ball's progress (and a little for its own part). The frames (457x120x3) are shrunk with SuperSuit, as
PettingZoo users do: grey, 84x84, the last 3 frames stacked, so each observation is an 84x84x3 image of
bytes (kept as bytes in the rollout). One model, shared by all pistons, is both the policy and the
critic: one Nature-DQN encoder (:func:`marlparts.models.cnn`) with a head for the logits of the three
moves and a head for the value; IPPO takes both from one forward pass per minibatch, so the update
runs the convolutions once instead of twice. The trained pistons are evaluated with sampled and with
greedy actions on copies seeded apart from training, next to random actions; ``--evaluations`` adds a
learning curve (``evaluations.jsonl``, as the benchmark runner reads it) and ``--resume`` goes on from the
newest checkpoint of a run cut short (``benchmarks/pixels/grid.json`` runs 3 seeds). Training on pixels is
slow on a CPU (``benchmarks/README.md``: about 14 env steps per second on two cores, measured with 4 copies).
Run ``python examples/pettingzoo/pistonball_ippo.py --help``.
"""

import argparse
import os
import time

import supersuit
import torch
from pettingzoo.butterfly import pistonball_v6
from torch import nn

from marlparts.agents import IPPO, IPPO_DEFAULT_CONFIG
from marlparts.envs import MultiAgentEnv, wrap_env
from marlparts.memories import RandomMemory
from marlparts.models import CategoricalMixin, Model, cnn
from marlparts.trainers import SequentialTrainer
from marlparts.trainers.opponents import random_team
from marlparts.utils import set_seed
from marlparts.utils.run_folders import checkpoint_to_resume

NUM_ENVS = 8  # env copies stepped together
TIMESTEPS = 100_000  # env steps of training (all copies counted)
MAX_CYCLES = 125  # steps per episode (pistonball's default)
DIRECTORY = "runs/pistonball_ippo"


def linear(inputs: int, outputs: int, *, gain: float) -> nn.Linear:
    """A linear layer with orthogonal weights of ``gain`` and zero bias."""
    layer = nn.Linear(inputs, outputs)
    nn.init.orthogonal_(layer.weight, gain=gain)
    nn.init.zeros_(layer.bias)
    return layer


class PolicyValue(CategoricalMixin, Model):
    """One Nature-DQN encoder from a piston's frames, with a head for its move logits and one for its value."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # pistonball's frames are nearly white (mean 0.96 after scaling): centred on each frame's mean, the first
        # convolution's filters stay alive (without it most of them went dark for every frame within 12 updates)
        self.encoder = nn.Sequential(cnn(self.observation_space.shape, 512, hidden_sizes=(), input_scale=1 / 255,
                                         subtract_image_mean=True),
                                     nn.ReLU())
        self.policy_head = linear(512, self.num_actions, gain=0.01)
        self.output_layer = linear(512, 1, gain=1.0)  # the values (PopArt rescales this layer)

    def compute(self, inputs, role=""):
        """The values alone for role ``"value"``; else the logits, with the values as ``outputs["values"]``."""
        features = self.encoder(inputs["observations"])
        values = self.output_layer(features)
        if role == "value":
            return values, {}
        return self.policy_head(features), {"values": values}


def make_pistonball(max_cycles: int = MAX_CYCLES):
    """Pistonball with discrete moves, its frames grey, 84x84, the last 3 stacked (SuperSuit). Pistonball draws its
    screen, which the observations are cut from, only where a render mode is set: without one every observation
    is the first frame, whatever the pistons and the ball do.
    """
    env = pistonball_v6.parallel_env(continuous=False, max_cycles=max_cycles, render_mode="rgb_array")
    env = supersuit.color_reduction_v0(env, mode="B")
    env = supersuit.resize_v1(env, x_size=84, y_size=84)
    return supersuit.frame_stack_v1(env, 3)


def make_env(num_envs: int = NUM_ENVS, workers: int = 0, seed: int = 0, max_cycles: int = MAX_CYCLES) -> MultiAgentEnv:
    """``num_envs`` copies of the preprocessed pistonball; the global state (which IPPO does not read) is built
    from the observations, as pistonball's own is the full-size frame.
    """
    return wrap_env(lambda: make_pistonball(max_cycles), num_envs=num_envs, workers=workers, seed=seed,
                    state_source="observations")


def make_agent(env: MultiAgentEnv, directory: str = DIRECTORY, **overrides) -> IPPO:
    """IPPO with one :class:`PolicyValue` model as every piston's policy and critic."""
    uid = env.possible_agents[0]
    model = PolicyValue(observation_space=env.observation_space(uid), action_space=env.action_space(uid))
    cfg = IPPO_DEFAULT_CONFIG.copy()
    # PettingZoo's own pistonball tutorial (J. K. Terry, 2021: Stable-Baselines3 PPO, the same preprocessing,
    # 100k env steps) learned with a short horizon, a wide ratio clip, tight gradient clipping and small
    # minibatches, taken here. Its entropy weight of 0.09 was for continuous moves: on the three discrete moves
    # it held the policy at uniform, so the weight is PPO's usual 0.01 on discrete moves from pixels. The
    # value loss weighs 0.01 against the policy loss: the encoder is shared, and a value loss weighted 0.5
    # made its features the same for every piston and frame within the first updates (most likely as the
    # pistons share one reward, so their values differ little), which left the policy blind
    # (benchmarks/pistonball_features.py).
    # Adam scales each parameter's step, so the value head still learns at the full rate.
    # Every piston is rewarded for the ball's progress, which most pistons neither see nor move: each piston's
    # advantage is mostly the others' doing, so an update needs many frames. 8 copies give each update 256
    # frames (4 copies gave 128, and 2 of 3 seeds did not learn by 30k env steps); the minibatches stay at 320
    # samples, so the Adam steps per env step are as many as with 4 copies.
    cfg["rollouts"] = 32  # 8 copies x 32 steps x 20 pistons = 5120 samples per update
    cfg["learning_epochs"] = 4
    cfg["mini_batches"] = 16  # 320 samples each
    cfg["learning_rate"] = 6e-4
    cfg["discount_factor"] = 0.95
    cfg["gae_lambda"] = 0.99
    cfg["entropy_loss_scale"] = 0.01
    cfg["ratio_clip"] = 0.3
    cfg["grad_norm_clip"] = 0.9
    cfg["value_loss_scale"] = 0.01
    cfg["experiment"]["directory"] = directory
    cfg.update(overrides)
    memories = {uid: RandomMemory(memory_size=cfg["rollouts"], num_envs=env.num_envs) for uid in env.possible_agents}
    return IPPO(possible_agents=env.possible_agents,
                models={uid: {"policy": model, "value": model} for uid in env.possible_agents},
                memories=memories, observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                device=env.device, cfg=cfg)


def parse_arguments() -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=TIMESTEPS, help="env steps to train for (all copies counted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=NUM_ENVS, help="env copies stepped together")
    parser.add_argument("--workers", type=int, default=0, help="worker processes for the env copies (0: none)")
    parser.add_argument("--max-cycles", type=int, default=MAX_CYCLES, help="steps per episode")
    parser.add_argument("--threads", type=int, default=2, help="PyTorch threads (the update's convolutions use them)")
    parser.add_argument("--directory", default=DIRECTORY, help="where TensorBoard logs and checkpoints go")
    parser.add_argument("--checkpoint", help="load this checkpoint first: training resumes from it")
    parser.add_argument("--resume", action="store_true",
                        help="go on from the newest checkpoint under --directory, if there is one (a run cut short; "
                             "with --evaluations a checkpoint is written at every evaluation): give each run a "
                             "directory of its own")
    parser.add_argument("--eval", action="store_true", help="only evaluate the agent of --checkpoint, no training")
    parser.add_argument("--episodes", type=int, default=8, help="episodes of each evaluation (each kind of action)")
    parser.add_argument("--evaluations", type=int, default=0,
                        help="evaluations at equal intervals over the run, the first before training, appended to "
                             "evaluations.jsonl (0: only one at the end)")
    return parser.parse_args()


def main() -> None:
    """Train (or resume, or only evaluate), save the agent, and print its evaluation next to random play."""
    args = parse_arguments()
    if args.resume and not args.checkpoint:  # None: nothing to go on from, a fresh start
        settings = {"seed": args.seed, "timesteps": args.timesteps, "num_envs": args.num_envs,
                    "max_cycles": args.max_cycles, "evaluations": args.evaluations, "episodes": args.episodes}
        args.checkpoint = checkpoint_to_resume(args.directory, settings)
    if args.eval and not args.checkpoint:
        raise SystemExit("--eval evaluates a saved agent: give its file with --checkpoint")
    if args.evaluations == 1 or args.evaluations < 0:
        raise SystemExit("--evaluations must be 0 or at least 2 (one before training, one at its end)")
    torch.set_num_threads(args.threads)
    set_seed(args.seed)
    env = make_env(args.num_envs, args.workers, args.seed, args.max_cycles)
    steps = max(args.timesteps // env.num_envs, 1)  # vectorized steps
    interval = max(steps // (args.evaluations - 1), 1) if args.evaluations else 0
    steps = interval * (args.evaluations - 1) if args.evaluations else steps  # evaluations at equal intervals
    agent = make_agent(env, args.directory)
    if args.checkpoint:
        agent.load(args.checkpoint)  # a resumed run trains what is left of its budget
    trainer = SequentialTrainer(env=env, agents=agent, cfg={
        "timesteps": max(steps - agent.timestep, 0), "eval_interval": interval, "eval_at_start": True,
        "checkpoint_at_eval": True, "eval_episodes": args.episodes,
        "eval_num_envs": min(env.num_envs, args.episodes), "eval_actions": "both"})
    if not args.eval:
        began = time.perf_counter()
        trainer.train()
        checkpoint = os.path.join(agent.experiment_dir, "checkpoints", "final_agent.pt")
        agent.save(checkpoint)
        print(f"trained {trainer.cfg['timesteps'] * env.num_envs} env steps in {time.perf_counter() - began:.1f} s; "
              f"checkpoint: {checkpoint}")
    result = trainer.eval(args.episodes)
    random_play = trainer.eval(args.episodes, opponents=random_team(env.possible_agents))
    print(f"evaluation over {args.episodes} episodes, return per piston: sampled {result['sampled']['mean_return']:.2f}, "
          f"greedy {result['greedy']['mean_return']:.2f} (random actions: {random_play['mean_return']:.2f})")
    env.close()


if __name__ == "__main__":
    main()
