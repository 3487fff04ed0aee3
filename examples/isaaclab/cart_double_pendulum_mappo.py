"""MAPPO on Isaac Lab's Isaac-Cart-Double-Pendulum-Direct-v0: two agents ("cart" and "pendulum") swing up and
balance a double pendulum on a cart, 4096 copies on the GPU.

Isaac Lab is started the documented way (``AppLauncher``, then ``parse_env_cfg`` and ``gymnasium.make``), and
the hyperparameters are those Isaac Lab ships for this task (its skrl MAPPO configuration): one policy and one
critic on the global state per agent, [32, 32] ELU layers, rollouts of 16, 8 epochs of 1 minibatch, learning
rate 3e-4 with a KL-adaptive schedule (0.008), value loss scale 2, no entropy bonus, 4800 updates. One change:
time-outs are bootstrapped from the final observation where this Isaac Lab version keeps it
(``compute_final_obs``). Run it with Isaac Lab's Python:

    ./isaaclab.sh -p examples/isaaclab/cart_double_pendulum_mappo.py --headless
"""

import argparse
import os
import time

try:
    from isaaclab.app import AppLauncher
except ImportError:
    try:  # Isaac Lab before 2.0
        from omni.isaac.lab.app import AppLauncher
    except ImportError:
        raise SystemExit("this example needs Isaac Lab (https://isaac-sim.github.io/IsaacLab): run it with Isaac "
                         "Lab's Python, e.g. ./isaaclab.sh -p examples/isaaclab/cart_double_pendulum_mappo.py") from None

TASK = "Isaac-Cart-Double-Pendulum-Direct-v0"
TIMESTEPS = 4800  # vectorised steps, as Isaac Lab ships it (x 4096 copies = 19.7M env steps)
DIRECTORY = "runs/isaaclab_cart_double_pendulum_mappo"

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--num_envs", type=int, default=None, help="env copies (default: the task's 4096)")
parser.add_argument("--timesteps", type=int, default=TIMESTEPS, help="vectorised steps to train for")
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--directory", default=DIRECTORY, help="where TensorBoard logs and checkpoints go")
parser.add_argument("--checkpoint", help="load this checkpoint first: training resumes from it")
parser.add_argument("--eval", action="store_true", help="only evaluate the agent of --checkpoint, no training")
AppLauncher.add_app_launcher_args(parser)  # --headless, --device, --enable_cameras, ...
args = parser.parse_args()
simulation_app = AppLauncher(args).app  # Isaac Sim must run before the rest is imported

import gymnasium  # noqa: E402
import torch  # noqa: E402

try:
    import isaaclab_tasks  # noqa: E402,F401  (registers the tasks)
    from isaaclab_tasks.utils import parse_env_cfg  # noqa: E402
except ImportError:  # Isaac Lab before 2.0
    import omni.isaac.lab_tasks  # noqa: E402,F401
    from omni.isaac.lab_tasks.utils import parse_env_cfg  # noqa: E402

from marlparts.agents import MAPPO, MAPPO_DEFAULT_CONFIG  # noqa: E402
from marlparts.envs import wrap_env  # noqa: E402
from marlparts.memories import RandomMemory  # noqa: E402
from marlparts.models import DeterministicMixin, GaussianMixin, Model, mlp  # noqa: E402
from marlparts.resources import KLAdaptiveLR, RunningStandardScaler  # noqa: E402
from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402


class Policy(GaussianMixin, Model):
    """[32, 32] ELU MLP to the mean of a Gaussian policy; learned log standard deviation starting at 0."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, self.num_actions, hidden_sizes=(32, 32), activation=torch.nn.ELU)
        self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

    def compute(self, inputs, role=""):
        """The mean action."""
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    """[32, 32] ELU MLP from the global state to one value."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = mlp(self.num_observations, 1, hidden_sizes=(32, 32), activation=torch.nn.ELU)

    def compute(self, inputs, role=""):
        """The value."""
        return self.net(inputs["observations"]), {}


def main() -> None:
    """Train (or resume, or only evaluate) and print the greedy evaluation."""
    set_seed(args.seed)
    env_cfg = parse_env_cfg(TASK, device=args.device, num_envs=args.num_envs)
    env_cfg.seed = args.seed
    if hasattr(env_cfg, "compute_final_obs"):
        env_cfg.compute_final_obs = True  # time-outs can then be bootstrapped
    env = wrap_env(gymnasium.make(TASK, cfg=env_cfg))

    models = {uid: {"policy": Policy(observation_space=env.observation_space(uid), action_space=env.action_space(uid)),
                    "value": Value(observation_space=env.state_space)}
              for uid in env.possible_agents}
    cfg = MAPPO_DEFAULT_CONFIG.copy()
    cfg.update({"rollouts": 16, "learning_epochs": 8, "mini_batches": 1, "discount_factor": 0.99, "gae_lambda": 0.95,
                "learning_rate": 3e-4, "learning_rate_scheduler": KLAdaptiveLR,
                "learning_rate_scheduler_kwargs": {"kl_threshold": 0.008},
                "state_preprocessor": RunningStandardScaler, "value_preprocessor": RunningStandardScaler,
                "grad_norm_clip": 1.0, "ratio_clip": 0.2, "value_clip": 0.2, "clip_predicted_values": True,
                "entropy_loss_scale": 0.0, "value_loss_scale": 2.0, "agent_specific_values": "none",
                "value_min_steps": 8})  # the critic's steps are the epochs' 8, as in Isaac Lab's configuration
    cfg["experiment"]["directory"] = args.directory
    memories = {uid: RandomMemory(memory_size=cfg["rollouts"], num_envs=env.num_envs, device=env.device)
                for uid in env.possible_agents}
    agent = MAPPO(possible_agents=env.possible_agents, models=models, memories=memories,
                  observation_spaces=env.observation_spaces, action_spaces=env.action_spaces,
                  state_spaces=env.state_spaces, device=env.device, cfg=cfg)
    if args.checkpoint:
        agent.load(args.checkpoint)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": args.timesteps,
                                                            "eval_episodes": env.num_envs})
    if not args.eval:
        began = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - began
        agent.save(os.path.join(agent.experiment_dir, "checkpoints", "final_agent.pt"))
        print(f"trained {args.timesteps * env.num_envs} env steps in {seconds:.0f} s")
    result = trainer.eval()  # on the training copies: Isaac Lab runs one simulation per process
    print(f"greedy evaluation over {result['episodes']} episodes: "
          + ", ".join(f"{uid} {value:.2f}" for uid, value in result["returns"].items()))
    env.close()


if __name__ == "__main__":
    main()
    simulation_app.close()
