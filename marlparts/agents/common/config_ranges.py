"""The values every numeric setting of the algorithms takes, checked once when an algorithm is built.

A setting means the same in every algorithm that has it, so one table serves them all: each algorithm
checks the keys its configuration has (:func:`~marlparts.utils.config.check_ranges`). A value out of range
(``discount_factor=1.5``, ``learning_epochs=0``) would otherwise train silently wrong or fail deep inside
an update.
"""

from typing import Any, Dict

from marlparts.utils.config import Allowed

UNIT = Allowed(0, 1)                                # [0, 1]: discounts, lambdas, probabilities
POSITIVE = Allowed(0, open_low=True)                # > 0: learning rates, clips, temperatures
NON_NEGATIVE = Allowed(0)                           # >= 0: scales and limits where 0 switches something off
AT_LEAST_ONE = Allowed(1, integer=True)             # counts of passes, batches, steps between events
WHOLE = Allowed(0, integer=True)                    # counts of steps that may be 0

ALGORITHM_CONFIG_RANGES: Dict[str, Any] = {
    # every algorithm
    "discount_factor": UNIT,
    "learning_rate": POSITIVE,
    "grad_norm_clip": NON_NEGATIVE,                 # 0: no clipping
    "experiment": {
        "write_interval": Allowed(1, integer=True, words=("auto",)),
        "checkpoint_interval": Allowed(0, integer=True, words=("auto",)),  # 0: no checkpoints
    },
    # the PPO family
    "rollouts": AT_LEAST_ONE,
    "learning_epochs": AT_LEAST_ONE,
    "mini_batches": AT_LEAST_ONE,
    "value_min_steps": AT_LEAST_ONE,                # 1: the critic takes only the steps of the epochs
    "gae_lambda": UNIT,
    "ratio_clip": POSITIVE,
    "value_clip": POSITIVE,
    "entropy_loss_scale": NON_NEGATIVE,
    "final_entropy_loss_scale": Allowed(0, words=(None,)),
    "entropy_annealing_timesteps": Allowed(1, integer=True, words=(None,)),
    "value_loss_scale": POSITIVE,
    "kl_threshold": NON_NEGATIVE,                   # 0: never stop the epochs early
    "sequence_length": AT_LEAST_ONE,
    # the off-policy family
    "batch_size": AT_LEAST_ONE,
    "gradient_steps": AT_LEAST_ONE,
    "update_interval": AT_LEAST_ONE,
    "learning_starts": WHOLE,
    "random_timesteps": WHOLE,
    "polyak": Allowed(0, 1, open_low=True),         # (0, 1]: 0 would never move the targets
    "target_update_interval": AT_LEAST_ONE,
    "n_step": AT_LEAST_ONE,
    "actor_learning_rate": POSITIVE,
    "critic_learning_rate": POSITIVE,
    "gumbel_temperature": POSITIVE,
    "logits_regularization": NON_NEGATIVE,
    "temperature": POSITIVE,
    "initial_entropy_coefficient": POSITIVE,
    "entropy_learning_rate": NON_NEGATIVE,          # 0: the entropy coefficient stays fixed
    "target_entropy": Allowed(words=(None,)),
    "policy_delay": AT_LEAST_ONE,
    "smooth_regularization_std": NON_NEGATIVE,
    "smooth_regularization_clip": NON_NEGATIVE,
    "exploration": {
        "initial_scale": NON_NEGATIVE,
        "final_scale": NON_NEGATIVE,
        "initial_epsilon": UNIT,
        "final_epsilon": UNIT,
        "timesteps": Allowed(0, integer=True, words=(None,)),  # None or 0: no decay
    },
}
