"""Multi-agent algorithms."""

from marlparts.agents.base import MultiAgent
from marlparts.agents.ippo import IPPO, IPPO_DEFAULT_CONFIG
from marlparts.agents.maddpg import MADDPG, MADDPG_DEFAULT_CONFIG
from marlparts.agents.mappo import MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.agents.matd3 import MATD3, MATD3_DEFAULT_CONFIG
from marlparts.agents.ppo_core import MultiAgentPPO

__all__ = ["IPPO", "IPPO_DEFAULT_CONFIG", "MADDPG", "MADDPG_DEFAULT_CONFIG", "MAPPO", "MAPPO_DEFAULT_CONFIG", "MATD3",
           "MATD3_DEFAULT_CONFIG", "MultiAgent", "MultiAgentPPO"]
