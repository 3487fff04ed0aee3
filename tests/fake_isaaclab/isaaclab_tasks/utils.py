"""Stand-in for ``isaaclab_tasks.utils``."""

from isaaclab_standin import DirectMARLEnvCfg, SimulationCfg

from isaaclab_tasks import TASKS


def parse_env_cfg(task_name, device="cuda:0", num_envs=None, use_fabric=None):
    """The task's configuration, with the device and number of copies set as Isaac Lab's function does."""
    agents, observations, actions, state = TASKS[task_name]
    return DirectMARLEnvCfg(possible_agents=agents, observation_spaces=dict(zip(agents, observations)),
                            action_spaces=dict(zip(agents, actions)), state_space=state,
                            num_envs=num_envs or 8, sim=SimulationCfg(device=device))
