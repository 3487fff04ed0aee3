"""What the wrappers of batched simulators (VMAS, Isaac Lab) share: simulators that step every copy at once
as tensors on one device. Nothing here leaves that device or loops over copies.
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence

import gymnasium
import numpy as np
import torch

from marlparts.envs.base import MultiAgentEnv
from marlparts.utils.agent_tensors import AgentLayout, AgentTensors
from marlparts.utils.spaces import action_bounds, action_size, flat_size


class BatchedSimulatorEnv(MultiAgentEnv):
    """Base of the wrappers around simulators that hold all ``num_envs`` copies as tensors on one device.

    A subclass sets ``possible_agents``, ``num_envs`` and ``device`` and calls :meth:`_set_spaces`; it then
    flattens observations with :meth:`_flat_observations`, builds infos with :meth:`_infos`, and checks the
    actions it is given with :meth:`_joint_actions`. Agents of these simulators never leave an episode: every agent is active
    at every step.
    """

    check_finite: bool = True

    def _set_spaces(self, observation_spaces: Mapping[str, gymnasium.Space],
                    action_spaces: Mapping[str, gymnasium.Space]) -> None:
        uids = self.possible_agents
        self._observation_spaces = {uid: observation_spaces[uid] for uid in uids}
        self._action_spaces = {uid: action_spaces[uid] for uid in uids}
        self.observation_layout = AgentLayout(uids, [flat_size(self._observation_spaces[u]) for u in uids])
        self.action_layout = AgentLayout(uids, [action_size(self._action_spaces[u]) for u in uids])
        self.agent_layout = AgentLayout(uids, [1] * len(uids))
        bounds = [action_bounds(self._action_spaces[u]) for u in uids]
        largest = float(np.finfo(np.float32).max)  # an unbounded Box still takes finite actions only
        self._action_low = torch.as_tensor(np.concatenate([low for low, _ in bounds]), dtype=torch.float32,
                                           device=self.device).clamp(min=-largest)
        self._action_high = torch.as_tensor(np.concatenate([high for _, high in bounds]), dtype=torch.float32,
                                            device=self.device).clamp(max=largest)
        self._integer_agents = [u for u in uids if not isinstance(self._action_spaces[u], gymnasium.spaces.Box)]
        self._one_kind_of_action = len(self._integer_agents) in (0, len(uids))
        self._all_active = AgentTensors(torch.ones(self.num_envs, len(uids), dtype=torch.bool, device=self.device),
                                        self.agent_layout)
        self._no_final_observation = torch.zeros(self.num_envs, self.observation_layout.total, device=self.device)

    @property
    def observation_spaces(self) -> Dict[str, gymnasium.Space]:
        """Observation space of every agent (one copy's, before flattening)."""
        return dict(self._observation_spaces)

    @property
    def action_spaces(self) -> Dict[str, gymnasium.Space]:
        """Action space of every agent (one copy's)."""
        return dict(self._action_spaces)

    def _flat_observations(self, per_agent: Sequence[Any]) -> torch.Tensor:
        """Every agent's ``(num_envs, ...)`` observation (a dict observation: its entries in the space's key
        order), in ``possible_agents`` order, flattened side by side into one ``(num_envs, total)`` tensor.
        """
        if isinstance(per_agent[0], dict):
            per_agent = [torch.cat([obs[key].reshape(self.num_envs, -1) for key in self._observation_spaces[uid].spaces],
                                   dim=1) for uid, obs in zip(self.possible_agents, per_agent)]
        try:
            flat = concatenate_observations(per_agent, self.num_envs)
        except RuntimeError:  # an observation whose size is no multiple of num_envs
            flat = None
        if flat is None or flat.shape[1] != self.observation_layout.total:  # one width check for every agent
            self._raise_misfit(per_agent)
        return flat

    def _raise_misfit(self, per_agent: Sequence[Any]) -> None:
        """Name the first agent whose observation is not ``(num_envs, its flat size)``."""
        for uid, obs, width in zip(self.possible_agents, per_agent, self.observation_layout.widths):
            if obs.numel() != self.num_envs * width:
                raise ValueError(f"the observation of agent {uid!r} has shape {tuple(obs.shape)}, expected "
                                 f"{(self.num_envs, width)} (num_envs, the {width} values of its space "
                                 f"{self._observation_spaces[uid]})")
        raise ValueError(f"the observations have shapes {[tuple(obs.shape) for obs in per_agent]}, expected "
                         f"{[(self.num_envs, width) for width in self.observation_layout.widths]} for "
                         f"agents {self.possible_agents}")

    def _per_agent_flags(self, flags: torch.Tensor) -> AgentTensors:
        """A ``(num_envs,)`` per-copy flag as every agent's ``(num_envs, 1)`` flag (one view, no copy)."""
        return AgentTensors(flags.reshape(-1, 1).bool().expand(-1, self.num_agents), self.agent_layout)

    def _infos(self, episode_end: torch.Tensor, final_observations: Optional[torch.Tensor],
               final_state: Optional[torch.Tensor]) -> Dict[str, Any]:
        """The infos of one step: every agent active, which copies ended, and their final observations
        (``final_observations`` None: no copy ended, or the simulator does not give them; see the subclass).
        """
        infos: Dict[str, Any] = {"active": self._all_active, "episode_end": episode_end.reshape(-1, 1).bool()}
        if final_observations is not None:
            infos["final_observation"] = AgentTensors(final_observations, self.observation_layout)
        if final_state is not None:
            infos["final_state"] = final_state
        return infos

    def _joint_actions(self, actions: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Every agent's action side by side, ``(num_envs, columns)`` on the env's device, after checking
        that each agent has one, of the right shape and kind, inside its action space.
        """
        if not isinstance(actions, Mapping):
            raise TypeError(f"step() takes a mapping agent id -> action tensor, got {type(actions).__name__}")
        same_layout = (isinstance(actions, AgentTensors) and actions.layout.uids == self.action_layout.uids
                       and actions.layout.widths == self.action_layout.widths)
        if same_layout and self._one_kind_of_action and actions.data.shape[0] == self.num_envs \
                and actions.data.dtype != torch.bool \
                and actions.data.dtype.is_floating_point == (not self._integer_agents):
            joint = actions.data
        else:
            joint = self._stack_checked(actions)
        joint = joint.to(self.device)
        inside = (joint >= self._action_low) & (joint <= self._action_high)  # NaN is outside
        if not bool(inside.all()):
            self._raise_outside(joint, inside)
        return joint

    def _per_agent_actions(self, joint: torch.Tensor) -> List[torch.Tensor]:
        """``joint`` split into each agent's columns, in ``possible_agents`` order; where integer and float
        agents were checked side by side (in float64), each gets its own kind back (int64, float32).
        """
        parts = list(joint.split(self.action_layout.widths, dim=1))
        if self._one_kind_of_action:
            return parts
        integer = set(self._integer_agents)
        return [part.long() if uid in integer else part.float() for uid, part in zip(self.possible_agents, parts)]

    def _stack_checked(self, actions: Mapping[str, Any]) -> torch.Tensor:
        unknown = [uid for uid in actions if uid not in self.action_layout._index]
        if unknown:
            raise KeyError(f"actions given for unknown agent ids {unknown}; possible agents: {self.possible_agents}")
        columns: List[torch.Tensor] = []
        for uid, width in zip(self.possible_agents, self.action_layout.widths):
            if uid not in actions:
                raise KeyError(f"no action for agent {uid!r}: step() needs one action tensor per possible agent")
            action = actions[uid]
            if not isinstance(action, torch.Tensor):
                raise TypeError(f"action for agent {uid!r} is a {type(action).__name__}; step() takes a torch "
                                f"tensor of shape (num_envs, columns) per agent")
            if tuple(action.shape) != (self.num_envs, width):
                raise ValueError(f"action for agent {uid!r} has shape {tuple(action.shape)}, expected "
                                 f"{(self.num_envs, width)} for action space {self._action_spaces[uid]}")
            if uid in self._integer_agents and (action.dtype.is_floating_point or action.dtype == torch.bool):
                raise TypeError(f"action for agent {uid!r} has dtype {str(action.dtype).replace('torch.', '')}, but "
                                f"its action space {self._action_spaces[uid]} takes integers (e.g. torch.long)")
            columns.append(action)
        kinds = {column.dtype.is_floating_point for column in columns}
        if len(kinds) > 1:  # integer and float actions side by side: check each in float, keep the integers exact
            return torch.cat([column.double() for column in columns], dim=1)
        return torch.cat(columns, dim=1)

    def _raise_outside(self, joint: torch.Tensor, inside: torch.Tensor) -> None:
        row, column = (int(i) for i in torch.nonzero(~inside)[0])
        uid = self.action_layout.uid_at(column)
        columns = self.action_layout.columns(uid)
        if not bool(torch.isfinite(joint[row, column])):
            raise ValueError(f"action for agent {uid!r} in env copy {row} is {joint[row, columns].tolist()}, which is not "
                             f"finite; the env was not stepped (action space {self._action_spaces[uid]})")
        raise ValueError(f"action for agent {uid!r} in env copy {row} is {joint[row, columns].tolist()}, outside its action "
                         f"space {self._action_spaces[uid]} (clip it, e.g. clip_actions = True on a Gaussian policy)")

    def _check_finite(self, observations: torch.Tensor, rewards: torch.Tensor, step: int) -> None:
        """Raise on a NaN or infinite observation or reward, naming agent, copy and step (one device sync)."""
        if not self.check_finite:
            return
        finite_obs, finite_rewards = torch.isfinite(observations), torch.isfinite(rewards)
        if bool(finite_obs.all() & finite_rewards.all()):
            return
        for what, finite, layout in (("observation", finite_obs, self.observation_layout),
                                     ("reward", finite_rewards, self.agent_layout)):
            if not bool(finite.all()):
                row, column = (int(i) for i in torch.nonzero(~finite)[0])
                uid = layout.uid_at(column)
                values = observations if what == "observation" else rewards
                raise ValueError(f"non-finite {what} ({float(values[row, column])}) for agent {uid!r} in env copy "
                                 f"{row} at step {step}")


def concatenate_observations(per_agent: Sequence[torch.Tensor], num_envs: int) -> torch.Tensor:
    """Every agent's ``(num_envs, ...)`` observation flattened and side by side: one ``(num_envs, total)`` tensor."""
    return torch.cat([obs.reshape(num_envs, -1) for obs in per_agent], dim=1).float()
