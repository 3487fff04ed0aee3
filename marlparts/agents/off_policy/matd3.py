"""MATD3 (Ackermann et al., 2019): MADDPG with the three fixes of TD3, written as a subclass.

This file is the template for a new algorithm built on an existing one: it overrides only the
pieces that differ and inherits acting, storage, sampling and the update loop.
"""

from typing import Optional, Tuple

import torch

from marlparts.agents.common.groups import AgentGroup
from marlparts.agents.off_policy.maddpg import MADDPG, MADDPG_DEFAULT_CONFIG
from marlparts.utils.config import Config

MATD3_DEFAULT_CONFIG: Config = MADDPG_DEFAULT_CONFIG.copy()
MATD3_DEFAULT_CONFIG["policy_delay"] = 2              # critic steps per actor (and target) step
MATD3_DEFAULT_CONFIG["smooth_regularization_std"] = 0.2   # target policy smoothing noise (continuous actions)
MATD3_DEFAULT_CONFIG["smooth_regularization_clip"] = 0.5


class MATD3(MADDPG):
    """MADDPG plus twin critics, target policy smoothing and delayed actor updates.

    Each agent needs a second critic, role ``"critic_2"``, shaped like ``"critic"``. What
    differs from :class:`MADDPG`, and is all this class overrides:

    1. twin critics: both are fitted to one target that takes the smaller of the two target
       Q-values (MADDPG's :meth:`next_q_values` takes the smallest over ``CRITIC_ROLES``);
    2. target policy smoothing: clipped Gaussian noise on the target actions of continuous
       agents (:meth:`target_actions`);
    3. delayed updates: actors and targets move every ``policy_delay`` critic steps
       (:meth:`update_actor_now`).
    """

    DEFAULT_CONFIG = MATD3_DEFAULT_CONFIG
    ROLES = ("policy", "critic", "critic_2")
    CRITIC_ROLES = ("critic", "critic_2")

    def target_actions(self, group: AgentGroup, next_observations: torch.Tensor,
                       next_mask: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, None]:
        """Target actions with clipped noise for continuous agents, kept inside the action space."""
        actions, _ = super().target_actions(group, next_observations, next_mask)
        uid = group.uids[0]
        if self.discrete[uid]:
            return actions, None
        clip = self.cfg["smooth_regularization_clip"]
        noise = (torch.randn_like(actions) * self.cfg["smooth_regularization_std"]).clamp(-clip, clip)
        low, high = self._bounds(uid, actions)
        return torch.max(torch.min(actions + noise, high), low), None

    def update_actor_now(self) -> bool:
        """Every ``policy_delay``-th gradient step."""
        return self.gradient_step % self.cfg["policy_delay"] == 0
