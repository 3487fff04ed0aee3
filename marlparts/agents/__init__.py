"""Multi-agent algorithms."""

from marlparts.agents.base import MultiAgent
from marlparts.agents.off_policy.base import OFF_POLICY_DEFAULT_CONFIG, OffPolicyMultiAgent
from marlparts.agents.off_policy.maddpg import MADDPG, MADDPG_DEFAULT_CONFIG
from marlparts.agents.off_policy.masac import MASAC, MASAC_DEFAULT_CONFIG
from marlparts.agents.off_policy.matd3 import MATD3, MATD3_DEFAULT_CONFIG
from marlparts.agents.off_policy.mfq import MFQ, MFQ_DEFAULT_CONFIG
from marlparts.agents.off_policy.qmix import QMIX, QMIX_DEFAULT_CONFIG
from marlparts.agents.off_policy.vdn import VDN, VDN_DEFAULT_CONFIG
from marlparts.agents.ppo.a2c import IA2C, IA2C_DEFAULT_CONFIG, MAA2C, MAA2C_DEFAULT_CONFIG
from marlparts.agents.ppo.coma import COMA, COMA_DEFAULT_CONFIG
from marlparts.agents.ppo.core import PPO_DEFAULT_CONFIG, MultiAgentPPO
from marlparts.agents.ppo.happo import HAPPO, HAPPO_DEFAULT_CONFIG
from marlparts.agents.ppo.ippo import IPPO, IPPO_DEFAULT_CONFIG
from marlparts.agents.ppo.mappo import MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.agents.ppo.mfac import MFAC, MFAC_DEFAULT_CONFIG
from marlparts.agents.ppo.recurrent import (
    RECURRENT_IPPO_DEFAULT_CONFIG,
    RECURRENT_MAPPO_DEFAULT_CONFIG,
    RecurrentIPPO,
    RecurrentMAPPO,
)
from marlparts.agents.ppo.vdac import VDAC, VDAC_DEFAULT_CONFIG, VDACMix

__all__ = [
    "COMA", "COMA_DEFAULT_CONFIG", "HAPPO", "HAPPO_DEFAULT_CONFIG", "IA2C", "IA2C_DEFAULT_CONFIG", "IPPO",
    "IPPO_DEFAULT_CONFIG", "MAA2C", "MAA2C_DEFAULT_CONFIG", "MADDPG",
    "MADDPG_DEFAULT_CONFIG", "MAPPO", "MAPPO_DEFAULT_CONFIG", "MASAC", "MASAC_DEFAULT_CONFIG", "MATD3",
    "MATD3_DEFAULT_CONFIG", "MFAC", "MFAC_DEFAULT_CONFIG", "MFQ", "MFQ_DEFAULT_CONFIG", "MultiAgent", "MultiAgentPPO",
    "OFF_POLICY_DEFAULT_CONFIG", "OffPolicyMultiAgent", "PPO_DEFAULT_CONFIG", "QMIX", "QMIX_DEFAULT_CONFIG",
    "RECURRENT_IPPO_DEFAULT_CONFIG", "RECURRENT_MAPPO_DEFAULT_CONFIG", "RecurrentIPPO", "RecurrentMAPPO", "VDAC",
    "VDACMix", "VDAC_DEFAULT_CONFIG", "VDN", "VDN_DEFAULT_CONFIG",
]
