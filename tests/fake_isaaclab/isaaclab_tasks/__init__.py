"""Stand-in for ``isaaclab_tasks``: registers the two multi-agent tasks the examples train on."""

import gymnasium

TASKS = {
    # task id: (agent ids, observation sizes, action sizes, state_space)
    "Isaac-Cart-Double-Pendulum-Direct-v0": (["cart", "pendulum"], [4, 3], [1, 1], -1),
    "Isaac-Shadow-Hand-Over-Direct-v0": (["right_hand", "left_hand"], [157, 157], [20, 20], 290),
}

for _task in TASKS:
    gymnasium.register(id=_task, entry_point="isaaclab_tasks.standin_task:StandInTask", disable_env_checker=True)
