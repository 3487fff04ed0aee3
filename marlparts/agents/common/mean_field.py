"""The mean action of the other agents, which mean-field methods (MFQ, MFAC) read in place of the joint action."""

import torch


def others_mean_actions(joint_actions: torch.Tensor, agent_indexes: torch.Tensor, actions: int) -> torch.Tensor:
    """``(batch, agents of the group, actions)``: for each agent at ``agent_indexes``, the mean one-hot action of
    the other agents active at the sample; ``joint_actions`` ``(batch, agents * actions)`` holds every agent's
    one-hot in agent order, zeros for an inactive agent. Zeros where no other agent is active.
    """
    per_agent = joint_actions.unflatten(1, (-1, actions))                       # (batch, agents, actions)
    own = per_agent[:, agent_indexes.to(per_agent.device)]                       # (batch, group, actions)
    counts = per_agent.sum((1, 2)).unsqueeze(1) - own.sum(-1)                   # active others of each agent
    return (per_agent.sum(1, keepdim=True) - own) / counts.clamp(min=1.0).unsqueeze(-1)
