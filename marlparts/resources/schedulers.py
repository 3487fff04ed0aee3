"""Learning-rate schedulers."""

from typing import Optional

import torch


class KLAdaptiveLR(torch.optim.lr_scheduler.LRScheduler):
    """Adapts the learning rate to keep the policy's KL divergence near ``kl_threshold``.

    After an update whose mean KL exceeded ``kl_factor * kl_threshold`` the rate is divided
    by ``lr_factor``; below ``kl_threshold / kl_factor`` it is multiplied by it; it stays in
    ``[min_lr, max_lr]``. Call ``step(kl)`` once per update.

    Args:
        optimizer: the wrapped optimizer.
        kl_threshold: the KL divergence aimed for.
        min_lr: smallest learning rate.
        max_lr: largest learning rate.
        kl_factor: tolerance band factor.
        lr_factor: multiplicative change.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, *, kl_threshold: float = 0.008, min_lr: float = 1e-6,
                 max_lr: float = 1e-2, kl_factor: float = 2.0, lr_factor: float = 1.5, last_epoch: int = -1) -> None:
        self.kl_threshold = kl_threshold
        self.min_lr = min_lr
        self.max_lr = max_lr
        self.kl_factor = kl_factor
        self.lr_factor = lr_factor
        self._last_lr = [group["lr"] for group in optimizer.param_groups]
        super().__init__(optimizer, last_epoch)

    def step(self, kl: Optional[float] = None, epoch: Optional[int] = None) -> None:
        """Adapt the rate to ``kl`` (no change when ``kl`` is None)."""
        if kl is not None:
            kl = float(kl)
            for group in self.optimizer.param_groups:
                if kl > self.kl_threshold * self.kl_factor:
                    group["lr"] = max(group["lr"] / self.lr_factor, self.min_lr)
                elif kl < self.kl_threshold / self.kl_factor:
                    group["lr"] = min(group["lr"] * self.lr_factor, self.max_lr)
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_lr(self) -> list:
        """Current learning rates."""
        return [group["lr"] for group in self.optimizer.param_groups]
