"""Advantage actor-critic for several agents (Mnih et al., 2016), the two forms EPyMARL benchmarks
(Papoudakis et al., 2021): IA2C, every critic on its own agent's observation, and MAA2C, one centralised
critic on the global state.

A2C takes one gradient step per rollout on the policy gradient ``-A log π(a|o)`` (no probability
ratio, no clipping) and on the critic's squared error, with an entropy bonus. It shares everything
else with the PPO algorithms: groups of agents as batches, GAE, value normalisation, preprocessors,
checkpoints. The defaults are EPyMARL's settings for LBF (learning rate 5e-4; entropy 0.001 for
IA2C and 0.01 for MAA2C; returns over 5 and 10 steps; no value normalisation, EPyMARL's
``standardise_returns: False``), with GAE at λ = 1 over a short rollout in place of EPyMARL's fixed
n-step return: each step's return then runs to the rollout's end, the classic A2C estimator.
Advantages are standardised over each set of models' active steps, as for the PPO algorithms,
where EPyMARL uses raw advantages and standardises the rewards instead: the policy step's size then
does not depend on the task's reward scale.

Why no value normaliser and one critic step by default: these are EPyMARL's A2C settings, which the
benchmark against its published tables follows. With one gradient step per rollout, a critic trained on
standardised targets lags them, and its errors then steer the single policy step: on simple_spread IPPO
in this regime fell below random play with the running scaler and with PopArt alike, while the critic
on raw returns, which barely moves, lets the policy learn, and so does PopArt with the critic topped up
to twenty steps per rollout (``value_min_steps=20``, the PPO algorithms' default;
``benchmarks/a2c_regime.py``). Set ``cfg["value_preprocessor"]`` and ``cfg["value_min_steps"]`` to use
them.
"""

from typing import Dict, Mapping

import torch

from marlparts.agents.common.groups import AgentGroup
from marlparts.agents.common.losses import masked_mean_weights
from marlparts.agents.ppo.ippo import IPPO, IPPO_DEFAULT_CONFIG
from marlparts.agents.ppo.mappo import MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.utils.config import Config

_A2C_SETTINGS = {
    "learning_epochs": 1,          # one gradient step per rollout: the samples are used once, on-policy
    "mini_batches": 1,
    "value_min_steps": 1,          # the critic's one step too, as EPyMARL's
    "learning_rate": 5e-4,
    "gae_lambda": 1.0,             # each step's return runs to the rollout's end (then bootstrapped)
    "clip_predicted_values": False,
    "value_preprocessor": None,    # EPyMARL's A2C standardises no returns (see the module's description)
}

IA2C_DEFAULT_CONFIG: Config = IPPO_DEFAULT_CONFIG.copy()
IA2C_DEFAULT_CONFIG.update(_A2C_SETTINGS, rollouts=5, entropy_loss_scale=0.001)

MAA2C_DEFAULT_CONFIG: Config = MAPPO_DEFAULT_CONFIG.copy()
MAA2C_DEFAULT_CONFIG.update(_A2C_SETTINGS, rollouts=10, entropy_loss_scale=0.01)


def a2c_losses(*, log_prob: torch.Tensor, advantages: torch.Tensor, entropy: torch.Tensor, predicted: torch.Tensor,
               targets: torch.Tensor, active: torch.Tensor, cfg: Mapping, model_sets: int = 1) -> Dict[str, torch.Tensor]:
    """A2C's losses, each a mean over the active samples (per model set, as the PPO losses): the policy gradient
    loss ``-A log π``, the critic's squared error (``value_loss_scale``) and the entropy bonus
    (``entropy_loss_scale``). One value per sample in every tensor; values in the critic's (normalised) units.
    """
    weights = masked_mean_weights(active.reshape(-1, 1), model_sets=model_sets, dtype=log_prob.dtype)
    terms = torch.cat([(advantages.reshape(-1, 1) * log_prob.reshape(-1, 1)),
                       (predicted.reshape(-1, 1) - targets.reshape(-1, 1)).square(), entropy.reshape(-1, 1)], dim=1)
    policy_gradient, value_error, entropy_mean = (terms * weights).sum(0).unbind()
    return {"policy": -policy_gradient, "value": cfg["value_loss_scale"] * value_error,
            "entropy": -cfg["entropy_loss_scale"] * entropy_mean, "kl": torch.zeros((), device=log_prob.device),
            "entropy_value": entropy_mean.detach()}


class A2CLossMixin:
    """The A2C losses in place of PPO's, for a subclass of :class:`~marlparts.agents.MultiAgentPPO`."""

    def batch_losses(self, group: AgentGroup, batch: Mapping[str, torch.Tensor], *, log_prob: torch.Tensor,
                     entropy: torch.Tensor, predicted: torch.Tensor) -> Dict[str, torch.Tensor]:
        """:func:`a2c_losses` of ``group`` on the stored ``batch``."""
        return a2c_losses(log_prob=log_prob, advantages=batch["advantages"].flatten(0, 1), entropy=entropy,
                          predicted=predicted, targets=batch["value_targets"].flatten(0, 1),
                          active=batch["active"].flatten(0, 1), cfg=self.loss_settings(group),
                          model_sets=group.model_sets)


class IA2C(A2CLossMixin, IPPO):
    """Independent A2C: decentralised critics on each agent's own observation (built as for :class:`IPPO`)."""

    DEFAULT_CONFIG = IA2C_DEFAULT_CONFIG


class MAA2C(A2CLossMixin, MAPPO):
    """Multi-agent A2C: a centralised critic on the global state (built as for :class:`MAPPO`)."""

    DEFAULT_CONFIG = MAA2C_DEFAULT_CONFIG
