"""Generalised advantage estimation with correct episode ends."""

from typing import Optional, Tuple

import torch


def compute_gae(*, rewards: torch.Tensor, values: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor,
                final_values: torch.Tensor, last_values: torch.Tensor, discount_factor: float,
                gae_lambda: float, active: Optional[torch.Tensor] = None,
                unusable: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns of a rollout of ``T`` steps (Schulman et al., 2016).

    All tensors are ``(T, ...)`` except ``last_values`` (``...``): the value of the observation
    that follows the last step. At step ``t`` the value of what comes next is

    - 0 where the episode was ``terminated`` (no future reward),
    - ``final_values[t]``, the value of the episode's final observation, where it was
      ``truncated`` (the future was cut off, not absent),
    - ``values[t + 1]`` otherwise (``last_values`` for the last step);

    and the advantage recursion stops at either kind of episode end, so no advantage mixes
    two episodes.

    With ``active`` (``(T, ...)`` bool: the agent acted at the step), each agent's rollout is its own
    active steps, as in a turn-based game: the rewards that reach an agent while it waits for its turn,
    and the end of its episode if it comes then (a loser's -1 arrives on the winner's move), belong to
    its last action; the value that follows an action is that of the agent's next active step; and
    the discount applies once per action. Advantages at inactive steps are 0. Where every step is
    active this is the recursion above.

    ``unusable`` (``(T, ...)`` bool, from :func:`waiting_bootstraps`) marks active steps whose own advantage
    rests on a value that cannot be trusted: they still anchor the step before them with their value, but
    the recursion stops there, so none of their advantage flows into earlier steps.

    Returns:
        ``(advantages, returns)`` with ``returns = advantages + values``.
    """
    terminated, truncated = terminated.bool(), truncated.bool()
    if (active is None or bool(active.all())) and (unusable is None or not bool(unusable.any())):
        return _gae_of_every_step(rewards=rewards, values=values, terminated=terminated, truncated=truncated,
                                  final_values=final_values, last_values=last_values,
                                  discount_factor=discount_factor, gae_lambda=gae_lambda)
    if active is None:
        active = torch.ones_like(terminated)
    active = active.bool()
    usable = torch.ones_like(active) if unusable is None else ~unusable.bool()
    advantages = torch.zeros_like(values)
    running = torch.zeros_like(last_values)
    next_values = last_values
    # what reached the agent after its next-earlier action: summed rewards and how its episode ended
    waiting_reward = torch.zeros_like(last_values)
    waiting_terminated = torch.zeros_like(terminated[0])
    waiting_truncated = torch.zeros_like(truncated[0])
    waiting_final = torch.zeros_like(last_values)
    for t in reversed(range(values.shape[0])):
        ended = terminated[t] | truncated[t]
        # an action's own step, and what came while the agent waited unless its episode ended at the action
        reward = rewards[t] + torch.where(ended, 0.0, waiting_reward)
        ends_terminated = terminated[t] | (~ended & waiting_terminated)
        ends_truncated = ~ends_terminated & (truncated[t] | (~ended & waiting_truncated))
        final = torch.where(truncated[t], final_values[t], waiting_final)
        following = torch.where(ends_terminated, 0.0, torch.where(ends_truncated, final, next_values))
        delta = reward + discount_factor * following - values[t]
        continues = ~(ends_terminated | ends_truncated)
        step_advantage = delta + discount_factor * gae_lambda * continues * running
        advantages[t] = torch.where(active[t], step_advantage, 0.0)
        running = torch.where(active[t], torch.where(usable[t], step_advantage, 0.0), running)
        next_values = torch.where(active[t], values[t], next_values)
        # at an inactive step the agent waits: keep what reaches it for its previous action
        waiting_reward = torch.where(active[t], 0.0, torch.where(ended, rewards[t], waiting_reward + rewards[t]))
        waiting_terminated = ~active[t] & torch.where(ended, terminated[t], waiting_terminated)
        waiting_truncated = ~active[t] & torch.where(ended, truncated[t] & ~terminated[t], waiting_truncated)
        waiting_final = torch.where(active[t], 0.0, torch.where(ended, final_values[t], waiting_final))
    return advantages, advantages + values


def _gae_of_every_step(*, rewards: torch.Tensor, values: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor,
                       final_values: torch.Tensor, last_values: torch.Tensor, discount_factor: float,
                       gae_lambda: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`compute_gae` where the agents act at every step: the TD errors of every step at once, then
    only the recursion ``A_t = δ_t + γλ (1 − ended_t) A_{t+1}`` runs step by step.
    """
    next_values = torch.cat([values[1:], last_values.unsqueeze(0)])
    following = torch.where(terminated, 0.0, torch.where(truncated, final_values, next_values))
    deltas = rewards + discount_factor * following - values
    coefficients = discount_factor * gae_lambda * ~(terminated | truncated)
    advantages = torch.empty_like(values)
    running = torch.zeros_like(last_values)
    for t in reversed(range(values.shape[0])):
        running = deltas[t] + coefficients[t] * running
        advantages[t] = running
    return advantages, advantages + values


def waiting_bootstraps(*, active: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor,
                       next_active: torch.Tensor) -> torch.Tensor:
    """The active steps ``(T, ...)`` bool of a turn-based game whose advantage would rest on the value of
    a waiting agent's observation: the agent acted, then was still waiting for its next turn when the
    rollout ended (``next_active``: whether it acts at the step after the rollout) or when a time limit
    (or a cut) ended its episode, at its own move or while it waited.

    A critic learns values at the steps where an agent acts; a waiting agent's observation is another
    kind of state, never trained, so such steps are left out of the losses (and stop the advantage
    recursion, see :func:`compute_gae`) rather than bootstrapped from it.
    """
    active = active.bool()
    ends_waiting = ~next_active.bool()  # the rollout ends while the agent waits
    unusable = torch.zeros_like(active)
    for t in reversed(range(active.shape[0])):
        ended = terminated[t].bool() | truncated[t].bool()
        cut = truncated[t].bool() & ~terminated[t].bool()  # bootstrapped from the observation after the step
        unusable[t] = active[t] & ((~ended & ends_waiting) | cut)  # cut at its own move: a waiting observation
        ends_waiting = torch.where(active[t], False, torch.where(ended, cut, ends_waiting))
    return unusable
