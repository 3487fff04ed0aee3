"""Fixed policies in some seats: a uniform random player, a user's function, or a frozen algorithm.

A trainer takes them as ``opponents={agent_id: policy}``, for training (seats no algorithm owns) or
for one evaluation (``trainer.eval(opponents=...)``, which may take seats an algorithm owns). A policy
is one of:

- ``"random"`` or :class:`RandomPolicy`: uniform over the legal actions (the action mask, where the
  env has one);
- a function ``policy(observation, action_mask) -> action``: ``observation`` is the seat's
  ``(num_envs, obs_size)`` tensor, ``action_mask`` its ``(num_envs, n)`` bool mask or None, and the
  action a ``(num_envs, columns)`` tensor as ``env.step`` takes it;
- a :class:`~marlparts.agents.base.MultiAgent`, usually a frozen copy of a trained one
  (:meth:`~marlparts.agents.base.MultiAgent.frozen_copy`): it acts greedily for the seats it lists.
"""

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import gymnasium
import numpy as np
import torch

from marlparts.agents.base import MultiAgent
from marlparts.envs.base import MultiAgentEnv
from marlparts.utils.seeding import derived_seed
from marlparts.utils.spaces import integer_start


class RandomPolicy:
    """Uniform random actions from ``action_space``, among the legal ones where a mask is given.

    Args:
        action_space: the seat's ``Discrete``, ``MultiDiscrete`` or ``Box`` action space.
        seed: seed of the policy's own generator (also set by :meth:`reset`).
    """

    def __init__(self, action_space: gymnasium.Space, *, seed: Optional[int] = None) -> None:
        if not isinstance(action_space, (gymnasium.spaces.Discrete, gymnasium.spaces.MultiDiscrete,
                                         gymnasium.spaces.Box)):
            raise TypeError(f"RandomPolicy takes a Discrete, MultiDiscrete or Box action space, got {action_space}")
        self.action_space = action_space
        self.generator = torch.Generator()
        self.reset(seed)

    def reset(self, seed: Optional[int]) -> None:
        """Start the generator afresh from ``seed`` (None: a random seed)."""
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(seed))

    def __call__(self, observation: torch.Tensor, action_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """One random action per env copy, ``(num_envs, columns)`` on the observation's device."""
        space, rows = self.action_space, observation.shape[0]
        if isinstance(space, gymnasium.spaces.Box):
            low = torch.as_tensor(np.broadcast_to(space.low, space.shape), dtype=torch.float32).reshape(1, -1)
            high = torch.as_tensor(np.broadcast_to(space.high, space.shape), dtype=torch.float32).reshape(1, -1)
            uniform = torch.rand((rows, low.shape[1]), generator=self.generator)
            return (low + uniform * (high - low)).to(observation.device)
        sizes = [int(space.n)] if isinstance(space, gymnasium.spaces.Discrete) else [int(n) for n in space.nvec.ravel()]
        weights = torch.ones(rows, sum(sizes)) if action_mask is None else action_mask.detach().cpu().float()
        columns = []
        for part in torch.split(weights, sizes, dim=1):
            columns.append(torch.multinomial(part, 1, generator=self.generator))
        actions = torch.cat(columns, dim=1)
        start = torch.as_tensor(integer_start(space), dtype=actions.dtype).reshape(1, -1)
        return (actions + start).to(observation.device)


SeatPolicy = Any  # "random", a RandomPolicy, a function (observation, action_mask) -> action, or a MultiAgent


def reseeded_in_evaluation(policy: SeatPolicy) -> bool:
    """Whether an evaluation plays ``policy`` as a uniform random player of its own, seeded from the evaluation's
    seed: ``"random"``, or a :class:`RandomPolicy` itself (not a subclass, which plays as it is).
    """
    return isinstance(policy, str) or type(policy) is RandomPolicy


def play_alike_in_evaluation(first: Mapping[str, SeatPolicy], second: Mapping[str, SeatPolicy],
                             action_space: Callable[[str], gymnasium.Space]) -> bool:
    """Whether two ``{agent_id: policy}`` mappings put the same players in the same seats of an evaluation: each
    seat the same object, or on both sides a policy :func:`reseeded_in_evaluation` over the seat's
    ``action_space(agent_id)``. Objects are told apart by identity, never asked to compare themselves.
    """
    def player(uid: str, policy: SeatPolicy) -> Any:
        uniform = reseeded_in_evaluation(policy) and (isinstance(policy, str) or policy.action_space == action_space(uid))
        return "random" if uniform else id(policy)

    return list(first) == list(second) and all(player(uid, first[uid]) == player(uid, second[uid]) for uid in first)


class Opponents:
    """The fixed policies of some seats, acting together.

    ``"random"`` seats get random players with generators of their own, seeded from ``seed`` (a new
    ``Opponents`` with the same seed plays the same moves); a :class:`RandomPolicy` or a function
    given by the user is called as it is, with its own state (seed it yourself), except that for an evaluation
    a :class:`RandomPolicy` (the class itself, not a subclass) is replaced by one seeded from ``seed`` like a
    ``"random"`` seat (the evaluation repeats itself and leaves the training player's generator as it was). Algorithms act in
    evaluation mode: for an evaluation (``evaluation``) each plays as a frozen copy of itself (a deep
    copy per evaluation), so nothing of the evaluation (mode, recurrent state) reaches the algorithm;
    for training the algorithm itself is put in evaluation mode once, here.

    Args:
        policies: ``{agent_id: policy}`` (see the module's documentation).
        env: the env the seats belong to (for their spaces and ids).
        seed: the seed of the random players (None: unseeded).
        evaluation: these seats are played for one evaluation.
    """

    def __init__(self, policies: Mapping[str, SeatPolicy], env: MultiAgentEnv, *, seed: Optional[int] = None,
                 evaluation: bool = False) -> None:
        if not isinstance(policies, Mapping):
            raise TypeError(f"opponents must be a mapping agent id -> policy, got {type(policies).__name__}")
        self.policies: Dict[str, SeatPolicy] = dict(policies)
        self.seats: List[str] = []
        self.functions: Dict[str, Callable[..., torch.Tensor]] = {}
        self.algorithms: List[MultiAgent] = []
        self._algorithm_seats: List[List[str]] = []
        copies: Dict[int, MultiAgent] = {}
        for index, (uid, policy) in enumerate(policies.items()):
            if uid not in env.possible_agents:
                raise KeyError(f"opponents names {uid!r}, which is not an agent of the environment (possible agents: "
                               f"{env.possible_agents})")
            self.seats.append(uid)
            if isinstance(policy, str) and policy != "random":
                raise ValueError(f"opponents[{uid!r}] is {policy!r}; the only named policy is 'random'")
            if isinstance(policy, str):  # a generator of its own, from the trainer's seed
                policy = RandomPolicy(env.action_space(uid), seed=derived_seed(seed, index))
            elif evaluation and reseeded_in_evaluation(policy):  # the same, so that training's stays untouched
                policy = RandomPolicy(policy.action_space, seed=derived_seed(seed, index))
            if isinstance(policy, MultiAgent):
                if uid not in policy.possible_agents:
                    raise ValueError(f"opponents[{uid!r}] is a {type(policy).__name__} that does not control {uid!r} "
                                     f"(it controls {policy.possible_agents})")
                if evaluation:
                    policy = copies.setdefault(id(policy), policy.frozen_copy())
                else:
                    policy.set_mode("eval")
                self._add_algorithm_seat(policy, uid)
            elif callable(policy):
                self.functions[uid] = policy
            else:
                raise TypeError(f"opponents[{uid!r}] is a {type(policy).__name__}; give 'random', a RandomPolicy, a "
                                "function (observation, action_mask) -> action, or an algorithm (MultiAgent)")

    def _add_algorithm_seat(self, algorithm: MultiAgent, uid: str) -> None:
        for index, known in enumerate(self.algorithms):
            if known is algorithm:
                self._algorithm_seats[index].append(uid)
                return
        self.algorithms.append(algorithm)
        self._algorithm_seats.append([uid])

    def act(self, observations: Mapping[str, torch.Tensor], states: Any, infos: Mapping[str, Any],
            timestep: int, timesteps: int) -> Dict[str, torch.Tensor]:
        """The action of every seat."""
        masks = (infos or {}).get("action_mask")
        actions: Dict[str, torch.Tensor] = {}
        for uid, function in self.functions.items():
            actions[uid] = function(observations[uid], None if masks is None else masks[uid])
        for algorithm, seats in zip(self.algorithms, self._algorithm_seats):
            chosen = algorithm.act(observations, states, infos, timestep, timesteps)
            actions.update({uid: chosen[uid] for uid in seats})
        return actions


def check_seats(opponents: Optional[Opponents], owned: Sequence[str]) -> None:
    """Raise ``ValueError`` if a seat given to a fixed policy for training is also an algorithm's."""
    if opponents is None:
        return
    taken = [uid for uid in opponents.seats if uid in owned]
    if taken:
        raise ValueError(f"agent id(s) {taken} are given to opponents and controlled by an algorithm; for training, "
                         "each seat has one controller (trainer.eval(opponents=...) may replace an algorithm's seats)")


def random_team(agent_ids: Sequence[str]) -> Dict[str, str]:
    """``{agent_id: "random"}`` for every id: a team of uniform random players, for ``opponents=``."""
    return {uid: "random" for uid in agent_ids}
