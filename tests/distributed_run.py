"""A short data-parallel run for the torchrun tests: every rank saves what the test compares.

    torchrun --standalone --nproc_per_node=2 distributed_run.py OUT [--different-spaces]
        [--algorithms mappo happo maddpg different-spaces]

Each rank trains each algorithm in turn (MAPPO by default) on its own copies of CountingEnv, where every step
rewards the action taken (0..3, so the best return of a 5-step episode is 15 and random actions score 7.5; MADDPG
on its continuous twin), then writes its parameters, its preprocessor statistics, its copy seeds and the greedy
evaluation to OUT/<algorithm>/rank<r>.pt. ``different-spaces`` builds MAPPO with one more observation value on rank
1 than on rank 0 and writes the error each rank raises to OUT/different-spaces/rank<r>.txt; ``--different-spaces``
gives the MAPPO runs those spaces and lets the error end the process. At its very end (an exit handler registered
before the process group exists, so it runs after any the library registers) each rank writes to OUT/exit<r>.txt
whether its process group is still initialised, whether the group object itself was freed, and how many gloo
threads are still running: a group that something still references outlives destroy_process_group(), and its gloo
threads, left running into the interpreter's finalisation, can abort the process (a worker thread that drops the
last reference to a tensor then needs the GIL that is gone).
"""

import argparse
import atexit
import os
import sys
import weakref

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from helpers import build_mappo  # noqa: E402
from toy_envs import ContinuousEnv, CountingEnv  # noqa: E402

from marlparts.envs import wrap_env  # noqa: E402
from marlparts.resources import RunningStandardScaler  # noqa: E402
from marlparts.trainers import SequentialTrainer  # noqa: E402
from marlparts.utils import set_seed  # noqa: E402
from marlparts.utils.distributed import init_distributed  # noqa: E402


class WiderCountingEnv(CountingEnv):
    """CountingEnv with one more observation value: a space that differs from the other ranks'."""

    def observation_space(self, agent):
        import gymnasium
        import numpy as np

        return gymnasium.spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)

    def _obs(self, agent, action=0.0):
        import numpy as np

        return np.append(super()._obs(agent, action), 0.0).astype(np.float32)


def gloo_threads():
    """The threads of this process that gloo runs (its worker and transport loops), by their names."""
    names = [open(f"/proc/self/task/{task}/comm").read().strip() for task in os.listdir("/proc/self/task")]
    return sum("gloo" in name for name in names)


def write_whether_the_process_group_outlives_the_script(out, rank, world_group):
    held = any(reference() is not None for reference in world_group)
    state = ["alive" if torch.distributed.is_initialized() else "destroyed", "held" if held else "freed",
             f"{gloo_threads()} gloo threads"]
    with open(os.path.join(out, f"exit{rank}.txt"), "w") as file:
        file.write(", ".join(state))


def train_and_save(algorithm, out, rank, world_size, different_spaces):
    """Train ``algorithm`` from seed 0 on this rank's copies and save what the tests compare to OUT/rank<r>.pt."""
    os.makedirs(out, exist_ok=True)
    set_seed(0)
    if algorithm == "maddpg":
        from test_maddpg import build

        env = wrap_env(lambda: ContinuousEnv(max_steps=5, leave_at=99), num_envs=4, seed=0)
        agent = build(env, cfg={"observation_preprocessor": RunningStandardScaler})
        steps = 30
    elif algorithm == "happo":  # a policy per agent, updated in an order every rank must share
        from test_happo import build as build_happo

        env = wrap_env(lambda: CountingEnv(max_steps=5, leave_at=99), num_envs=4, seed=0)
        agent = build_happo(env, os.path.join(out, "runs"),
                            cfg={"observation_preprocessor": RunningStandardScaler, "learning_epochs": 2})
        steps = 20
    else:
        kind = WiderCountingEnv if different_spaces and rank == 1 else CountingEnv
        env = wrap_env(lambda: kind(max_steps=5, leave_at=99), num_envs=8, seed=0)
        agent = build_mappo(env, rollouts=5, directory=os.path.join(out, "runs"),
                            cfg={"learning_rate": 3e-3, "entropy_loss_scale": 0.0, "learning_epochs": 4,
                                 "observation_preprocessor": RunningStandardScaler,
                                 "state_preprocessor": RunningStandardScaler,
                                 "experiment": {"experiment_name": "run", "write_interval": 5}})
        steps = 200  # greedy return 14.0 of 15 at 50 steps, 15 from 100 on
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": steps, "disable_progressbar": True})
    before = trainer.eval(episodes=16)["mean_return"]
    trainer.train()
    result = trainer.eval(episodes=16)
    buffers = {name: [t.clone() for t in part.state_dict().values() if isinstance(t, torch.Tensor)]
               for name, part in agent.checkpoint_parts().items() if isinstance(part, torch.nn.Module)}
    torch.save({"rank": rank, "world_size": world_size, "parts": buffers, "copy_seeds": env.copy_seeds,
                "mean_return": result["mean_return"], "episodes": result["episodes"],
                "mean_return_before": before},
               os.path.join(out, f"rank{rank}.pt"))


def write_the_error_of_ranks_with_different_spaces(out, rank, world_size):
    """Build MAPPO with a wider observation on rank 1 and write the error this rank raises (or "no error")."""
    try:
        train_and_save("mappo", out, rank, world_size, different_spaces=True)
    except ValueError as error:
        message = str(error)
    else:
        message = "no error"
    with open(os.path.join(out, f"rank{rank}.txt"), "w") as file:
        file.write(message)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--different-spaces", action="store_true")
    parser.add_argument("--algorithms", "--algorithm", nargs="+", choices=("mappo", "happo", "maddpg", "different-spaces"),
                        default=["mappo"],
                        help="trained one after the other in one process group, each saved to OUT/<algorithm>")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    world_group = []  # a weak reference to the process group, once there is one
    atexit.register(write_whether_the_process_group_outlives_the_script, args.out, int(os.environ["RANK"]), world_group)
    rank, world_size = init_distributed()
    world_group.append(weakref.ref(torch.distributed.group.WORLD))
    for algorithm in args.algorithms:
        if algorithm == "different-spaces":
            write_the_error_of_ranks_with_different_spaces(os.path.join(args.out, algorithm), rank, world_size)
        else:
            train_and_save(algorithm, os.path.join(args.out, algorithm), rank, world_size, args.different_spaces)


if __name__ == "__main__":
    main()
