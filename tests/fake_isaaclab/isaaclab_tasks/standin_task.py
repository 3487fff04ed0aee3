"""A task of any agents and sizes on the stand-in DirectMARLEnv: random observations, reward for small actions,
random terminations."""

import torch
from isaaclab_standin import DirectMARLEnv


class StandInTask(DirectMARLEnv):
    """Observations are noise; each agent is rewarded for keeping its action near zero."""

    def __init__(self, cfg, render_mode=None, **kwargs):
        super().__init__(cfg)
        self.actions = {}

    def _pre_physics_step(self, actions):
        self.actions = {uid: action.clamp(-1, 1) for uid, action in actions.items()}

    def _apply_action(self):
        pass

    def _get_observations(self):
        return {uid: torch.randn(self.num_envs, self.cfg.observation_spaces[uid], generator=self.generator,
                                 device=self.device) for uid in self.possible_agents}

    def _get_states(self):
        return torch.randn(self.num_envs, self.cfg.state_space, generator=self.generator, device=self.device)

    def _get_rewards(self):
        return {uid: -self.actions[uid].square().sum(dim=1) for uid in self.possible_agents}

    def _get_dones(self):
        fell = torch.rand(self.num_envs, generator=self.generator, device=self.device) < 0.02
        time_out = self.episode_length_buf >= self.max_episode_length - 1
        return ({uid: fell.clone() for uid in self.possible_agents},
                {uid: time_out.clone() for uid in self.possible_agents})
