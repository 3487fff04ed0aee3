"""Helpers shared by the parts: spaces, seeding, configuration, tracking, per-agent tensors."""

from marlparts.utils.agent_tensors import AgentLayout, AgentTensors, stack_agents, unstack_agents, with_own_actions
from marlparts.utils.seeding import set_seed

__all__ = ["AgentLayout", "AgentTensors", "set_seed", "stack_agents", "unstack_agents", "with_own_actions"]
