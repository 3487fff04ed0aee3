"""MASAC: multi-agent soft actor-critic with centralised twin critics, written as a subclass of MADDPG."""

from typing import Any, Dict, List, Optional, Tuple

import gymnasium
import torch
from torch import nn

from marlparts.agents.common.groups import AgentGroup
from marlparts.agents.common.losses import masked_mean
from marlparts.agents.common.trained_model import TrainedModel
from marlparts.agents.off_policy.maddpg import MADDPG, MADDPG_DEFAULT_CONFIG
from marlparts.utils.config import Config
from marlparts.utils.spaces import flat_size

MASAC_DEFAULT_CONFIG: Config = MADDPG_DEFAULT_CONFIG.copy()
MASAC_DEFAULT_CONFIG["exploration"]["noise"] = None     # the policy's own sampling explores
MASAC_DEFAULT_CONFIG["initial_entropy_coefficient"] = 0.2   # alpha before it is learned
MASAC_DEFAULT_CONFIG["entropy_learning_rate"] = 3e-4    # Adam rate of log alpha (0: alpha stays fixed)
MASAC_DEFAULT_CONFIG["target_entropy"] = None           # per group; None: minus the action size


class EntropyCoefficient(nn.Module):
    """The learned temperature ``alpha = exp(log_alpha)`` of one group."""

    def __init__(self, initial: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(float(initial)).log())

    def forward(self) -> torch.Tensor:
        """``alpha``."""
        return self.log_alpha.exp()


class MASAC(MADDPG):
    """Soft actor-critic for several agents: stochastic policies, centralised twin critics (every
    agent's observation and action, as in MADDPG) and an entropy temperature learned per group.

    Each agent needs a ``"policy"`` that returns actions with their log-probabilities (e.g.
    :class:`~marlparts.models.SquashedGaussianMixin`), and two critics, ``"critic"`` and
    ``"critic_2"``, shaped as MADDPG's. What differs from :class:`MADDPG`, and is all this class
    overrides:

    1. the TD target's next actions are sampled from the current policies, and the next value is
       ``min(Q'_1, Q'_2) − alpha log π(a'|o')`` (:meth:`target_actions`, :meth:`next_values`);
    2. each agent's actor minimises ``alpha log π(a_i|o_i) − min(Q_1, Q_2)_i(x, a_1..a_i..a_N)`` with its
       own action sampled from its policy and the others' from the batch (:meth:`actor_objective`);
    3. each group's temperature follows ``min −log alpha (log π + target entropy)`` after the actor
       step (:meth:`gradient_update`).

    Actions are sampled in training and the squashed mean is taken in evaluation.
    """

    DEFAULT_CONFIG = MASAC_DEFAULT_CONFIG
    ROLES = ("policy", "critic", "critic_2")
    CRITIC_ROLES = ("critic", "critic_2")
    ACTOR_CRITIC_ROLES = ("critic", "critic_2")  # the actors follow min(Q_1, Q_2)
    POLICY_TARGETS = False  # next actions come from the current policies

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.entropy: List[TrainedModel] = []  # one temperature per group
        self.target_entropies: List[float] = []
        for group in self.groups:
            uid = group.uids[0]
            if not isinstance(self.action_spaces[uid], gymnasium.spaces.Box):
                raise TypeError(f"{type(self).__name__} supports Box actions; agent {uid!r} has {self.action_spaces[uid]}")
            self._check_log_prob(group)
            coefficient = EntropyCoefficient(self.cfg["initial_entropy_coefficient"]).to(self.device)
            record = TrainedModel(name=f"entropy[{'+'.join(group.uids)}]", role="entropy", model=coefficient,
                                  owners=list(group.uids),
                                  optimizer=torch.optim.Adam(coefficient.parameters(), lr=self.cfg["entropy_learning_rate"]))
            self.trained.append(record)
            self.entropy.append(record)
            target = self.cfg["target_entropy"]
            self.target_entropies.append(-float(flat_size(self.action_spaces[uid])) if target is None else float(target))
        self._log_probs: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}

    def _check_log_prob(self, group: AgentGroup) -> None:
        uid = group.uids[0]
        policy = group.models["policy"]
        with torch.no_grad():
            _, log_prob, _ = policy.act({"observations": torch.zeros(2, policy.num_observations, device=self.device)},
                                        role="policy")
        if log_prob is None:
            raise TypeError(f"{type(self).__name__} needs policies that return the log-probability of their actions: "
                            f"models[{uid!r}]['policy'] ({type(policy).__name__}) returns None (use "
                            "SquashedGaussianMixin or GaussianMixin)")

    def alpha(self, group: AgentGroup) -> torch.Tensor:
        """The group's temperature (no gradient)."""
        return self.entropy[self.groups.index(group)].model().detach()

    # ----------------------------------------------------------------------------- acting
    def act(self, observations: Any, states: Optional[torch.Tensor], infos: Any, timestep: int,
            timesteps: int) -> Dict[str, torch.Tensor]:
        """Sampled actions in training (uniform ones for ``random_timesteps``), the squashed mean in evaluation."""
        actions: Dict[str, torch.Tensor] = {}
        random = self.exploring_randomly()
        for group in self.groups:
            obs = self.observe(group, observations, infos)
            sampled, _, outputs = group.models["policy"].act({"observations": obs.flatten(0, 1)}, role="policy")
            chosen = sampled if self.training or self.stochastic_evaluation else outputs["mean_actions"]
            chosen = chosen.unflatten(0, obs.shape[:2])
            if random:
                low, high = self._bounds(group.uids[0], chosen)
                chosen = low + torch.rand_like(chosen) * (high - low)
            actions.update({uid: chosen[:, i] for i, uid in enumerate(group.uids)})
        return actions

    # ----------------------------------------------------------------------------- update
    def target_actions(self, group: AgentGroup, next_observations: torch.Tensor,
                       next_mask: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Actions sampled from the current policy at the next observations, with their log-probabilities (Box
        actions only: no action mask applies).
        """
        return self.policy_outputs(group.models["policy"], next_observations)

    def next_values(self, group: AgentGroup, q_next: torch.Tensor, log_prob: Optional[torch.Tensor]) -> torch.Tensor:
        """The soft value ``min(Q'_1, Q'_2) − alpha log π(a'|o')``."""
        return q_next - self.alpha(group) * log_prob.squeeze(-1)

    def actor_objective(self, group: AgentGroup, own_q: torch.Tensor, outputs: torch.Tensor,
                        log_prob: Optional[torch.Tensor]) -> torch.Tensor:
        """``alpha log π(a_i|o_i) − Q_i`` per sample; the log-probabilities are kept for the temperature step."""
        log_prob = log_prob.squeeze(-1)
        self._log_probs[self.groups.index(group)] = log_prob.detach()
        return self.alpha(group) * log_prob - own_q

    def gradient_update(self, batches: List[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
        """MADDPG's critic and actor steps, then one temperature step per group."""
        losses = super().gradient_update(batches)
        if self.cfg["entropy_learning_rate"] > 0:
            temperature_loss = 0.0
            for index, (batch, record) in enumerate(zip(batches, self.entropy)):
                log_prob = self._log_probs[index]
                temperature_loss = temperature_loss - masked_mean(
                    record.model.log_alpha * (log_prob + self.target_entropies[index]), batch["active"].squeeze(-1))
            self.optimize(self.entropy, temperature_loss)
            losses["Loss / entropy coefficient"] = temperature_loss.detach()
        for group, record in zip(self.groups, self.entropy):
            losses[f"Policy / alpha / {record.name}"] = self.alpha(group)
        return losses
