"""VDN (Sunehag et al., 2018): the team value is the sum of the agents' utilities."""

from typing import Any, Optional

import torch

from marlparts.agents.off_policy.qmix import QMIX, QMIX_DEFAULT_CONFIG
from marlparts.utils.config import Config

VDN_DEFAULT_CONFIG: Config = QMIX_DEFAULT_CONFIG.copy()


class VDN(QMIX):
    """QMIX with the mixer replaced by a sum: each agent needs only its ``"q"`` model, and no global
    state is needed. Everything else (acting, targets, double Q, masks) is :class:`QMIX`'s.
    """

    DEFAULT_CONFIG = VDN_DEFAULT_CONFIG
    ROLES = ("q",)

    def _add_mixer(self) -> Optional[Any]:
        """No mixer to train."""
        return None

    def uses_state(self) -> bool:
        """A sum needs no state."""
        return False

    def mix(self, record: Any, agent_values: torch.Tensor, states: Optional[torch.Tensor], *, target: bool) -> torch.Tensor:
        """``Q_tot = Σ_i Q_i``."""
        return agent_values.sum(-1)
