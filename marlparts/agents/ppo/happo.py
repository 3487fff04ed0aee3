"""Heterogeneous-Agent PPO (Kuba et al., 2022): one policy per agent, updated one agent after another."""

from typing import Any, Dict, List, Tuple

import torch

from marlparts.agents.common.groups import AgentGroup
from marlparts.agents.ppo.mappo import MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.utils.config import Config
from marlparts.utils.distributed import broadcast_tensors, mean_over_ranks

HAPPO_DEFAULT_CONFIG: Config = MAPPO_DEFAULT_CONFIG.copy()
HAPPO_DEFAULT_CONFIG["stack_models"] = False  # each agent's policy is stepped on its own, in turn


class HAPPO(MAPPO):
    """HAPPO: MAPPO's centralised critic, and one policy per agent updated sequentially.

    At each update the agents are taken in a new random order. Agent ``i_m`` is trained with PPO's
    clipped surrogate on its advantage weighted by ``M``, the product over the agents updated before it
    of their probability ratios ``pi_new(a|o) / pi_old(a|o)`` on the rollout's samples; then ``M`` takes in
    its own ratio. The critic is trained afterwards on the value loss alone. Each policy step runs that policy
    alone (:meth:`policy_losses`) and each critic step the critic alone (:meth:`value_losses`): those are the
    loss hooks a subclass overrides (not ``group_losses``). Agents must not share a
    policy (build one ``Policy`` per agent); the critic may be shared. See :class:`MAPPO` for the critic
    options and :class:`~marlparts.agents.ppo.core.MultiAgentPPO` for what the update shares with PPO.
    """

    DEFAULT_CONFIG = HAPPO_DEFAULT_CONFIG

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        owners: dict = {}  # parameter -> the agents whose policy holds it
        for group in self.groups:
            for parameter in group.models["policy"].parameters():
                owners.setdefault(id(parameter), []).extend(group.uids)
        shared = sorted({tuple(uids) for uids in owners.values() if len(uids) > 1})
        if shared:
            raise ValueError(f"HAPPO updates one agent's policy after another, so agents may not share a policy or "
                             f"any of its parameters; these agents share: {[list(uids) for uids in shared]}. Build one "
                             f"policy per agent (and keep cfg['stack_models'] False)")

    def agent_row_roles(self) -> Tuple[str, ...]:
        """None: each agent has a policy of its own, so no policy reads the other agents' rows."""
        return ()

    def update(self, timestep: int, timesteps: int) -> None:
        """HAPPO update on the rollout just collected.

        1. advantages and returns by GAE (as MAPPO);
        2. ``M = 1``; for each agent in a random order: PPO epochs on its policy with advantages ``M * A``,
           then ``M *= pi_new / pi_old`` of that agent on every sample (an agent that never acted in the
           rollout is passed over);
        3. the critic's epochs on the value loss;
        4. the preprocessors and value normalisers take in the rollout's statistics.
        """
        self.annealing_progress = self.progress_of(timestep)
        self.compute_advantages()
        self.plan_steps()
        acted = self.groups_that_acted()
        factor = torch.ones(len(self.groups[0].memory), device=self.device)
        policy_metrics: List[dict] = []
        last_kls: List[float] = []  # each agent's KL at its last epoch, for a KL-adaptive learning rate
        for group in self.update_order():
            if group not in acted:  # its agent never acted: no step (its ratios would all be 1)
                continue
            metrics, last_kl = self.train_policy(group, factor)
            policy_metrics += metrics
            last_kls.append(last_kl)
            factor = factor * self.probability_ratios(group)
        value_metrics = self.train_critics(acted)
        self.update_preprocessors()
        self.finish_update(sum(last_kls) / max(len(last_kls), 1), {
            "Loss / policy": _mean(policy_metrics, "policy"), "Loss / value": _mean(value_metrics, "value"),
            "Policy / entropy": _mean(policy_metrics, "entropy_value"), "Policy / KL": _mean(policy_metrics, "kl")})

    def groups_that_acted(self) -> List[AgentGroup]:
        """The groups (one agent each) with an active sample in the stored rollout, on any ``torchrun`` rank
        (:meth:`plan_steps`). An agent that sat out the whole rollout (it had left, or it was never its turn) is
        passed over: its policy takes no step (as in every algorithm of the family), and its ratios would all be 1,
        as in the reference implementation (HARL).
        """
        return [group for group in self.groups if group.uids[0] in self.acted_agents]

    def update_order(self) -> List[AgentGroup]:
        """The groups (one agent each) in a fresh random order, the same on every ``torchrun`` rank (rank 0's)."""
        order = torch.randperm(len(self.groups), device=self.device)
        broadcast_tensors([order])
        return [self.groups[i] for i in order.tolist()]

    def train_policy(self, group: AgentGroup, factor: torch.Tensor) -> Tuple[List[dict], float]:
        """PPO epochs on ``group``'s policy with its stored advantages weighted by ``factor`` (one per sample);
        the minibatches' metrics and the KL of the last epoch (averaged over ``torchrun`` ranks, so that every
        rank stops at the same epoch past ``kl_threshold``).
        """
        memory = group.memory
        advantages = memory.get_tensor_by_name("advantages").clone()
        memory.set_tensor_by_name("advantages", advantages * factor.view(advantages.shape[:2] + (1, 1)))
        metrics: List[dict] = []
        kl = 0.0
        try:
            for _ in range(self.cfg["learning_epochs"]):
                epoch = []
                for indexes in self.minibatch_indexes():
                    with self.autocast():
                        losses = self.policy_losses(group, indexes)
                    self.optimize([group.trained["policy"]], losses["policy"] + losses["entropy"])
                    epoch.append({key: float(value.detach()) for key, value in losses.items()})
                metrics += epoch
                kl = mean_over_ranks(_mean(epoch, "kl"))
                if self.cfg["kl_threshold"] and kl > self.cfg["kl_threshold"]:
                    break
        finally:
            memory.set_tensor_by_name("advantages", advantages)
        return metrics, kl

    @torch.no_grad()
    def probability_ratios(self, group: AgentGroup) -> torch.Tensor:
        """``pi_new(a|o) / pi_old(a|o)`` of ``group``'s agent on every stored sample (1 where it was inactive)."""
        memory = group.memory
        names = ["observations", "actions", "log_prob", "active"] + (["action_mask"] if self._has_action_mask else [])
        stored = {name: memory.get_tensor_by_name(name, keepdim=False) for name in names}
        inputs = {"observations": self._policy_inputs(group, stored["observations"]),
                  "taken_actions": stored["actions"].flatten(0, 1)}
        if self._has_action_mask:
            inputs["action_mask"] = stored["action_mask"].flatten(0, 1)
        _, log_prob, _ = group.models["policy"].act(inputs, role="policy")
        ratios = (log_prob.reshape(-1) - stored["log_prob"].reshape(-1)).exp()
        return torch.where(stored["active"].reshape(-1), ratios, torch.ones_like(ratios))

    def policy_losses(self, group: AgentGroup, indexes: torch.Tensor) -> Dict[str, torch.Tensor]:
        """PPO's losses of ``group`` on the samples ``indexes`` with the policy alone run: the critic's predictions
        stand at the stored old values (a constant value loss, no critic pass), since its step trains the policy.
        """
        batch = self.sample_minibatch(group, indexes)
        log_prob, outputs = self.policy_log_prob(group, batch)
        return self.batch_losses(group, batch, log_prob=log_prob, entropy=outputs["entropy"],
                            predicted=batch["old_values"].flatten(0, 1))

    def train_critics(self, acted: List[AgentGroup]) -> List[dict]:
        """The critic's epochs: the value loss of every agent, one step per minibatch for each distinct critic of the
        groups ``acted`` (those with an active sample), topped up to ``value_min_steps`` steps
        (:meth:`~marlparts.agents.MultiAgentPPO.critic_minibatches`).
        """
        critics = list({id(group.trained["value"]): group.trained["value"] for group in acted}.values())
        metrics: List[dict] = []
        if not critics:  # no agent acted in the rollout
            return metrics
        for indexes in self.critic_minibatches():
            with self.autocast():
                loss = self.critic_loss_alone(indexes)
            self.optimize(critics, loss)
            metrics.append({"value": float(loss.detach())})
        return metrics


def _mean(metrics: List[dict], key: str) -> float:
    """The mean of ``key`` over a list of per-minibatch metrics (0 for none)."""
    return sum(entry[key] for entry in metrics) / max(len(metrics), 1)
