"""Metrics to TensorBoard and, when asked, to Weights & Biases, through one ``add``/``write`` path."""

import collections
from typing import Any, Dict, Optional

import numpy as np


class Tracker:
    """Accumulates scalar metrics and writes their means every ``write`` call.

    Args:
        directory: where TensorBoard event files go; ``None`` disables TensorBoard.
        wandb: also log to Weights & Biases (``wandb`` must be installed; offline mode works).
        wandb_kwargs: passed to ``wandb.init`` (``project``, ``mode="offline"``, ...).
        config: the run's configuration, recorded by Weights & Biases.
    """

    def __init__(self, directory: Optional[str], *, wandb: bool = False, wandb_kwargs: Optional[Dict[str, Any]] = None,
                 config: Optional[Dict[str, Any]] = None) -> None:
        self._values: Dict[str, list] = collections.defaultdict(list)
        self.writer = None
        self.wandb_run = None
        if directory is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=directory)
        if wandb:
            try:
                import wandb as wandb_module
            except ImportError as error:
                raise ImportError("cfg['experiment']['wandb'] is True but wandb is not installed: "
                                  "pip install 'marlparts[wandb]'") from error
            kwargs = {"dir": directory, "config": _plain(config or {}), "sync_tensorboard": False}
            kwargs.update(wandb_kwargs or {})
            self.wandb_run = wandb_module.init(**kwargs)

    def add(self, tag: str, value: float) -> None:
        """Record one value of metric ``tag``."""
        self._values[tag].append(float(value))

    def means(self) -> Dict[str, float]:
        """Mean of each metric recorded since the last :meth:`write`."""
        return {tag: float(np.mean(values)) for tag, values in self._values.items() if values}

    def write(self, step: int) -> Dict[str, float]:
        """Write the means at ``step``, clear them, and return them."""
        means = self.means()
        if self.writer is not None:
            for tag, value in means.items():
                self.writer.add_scalar(tag, value, step)
            self.writer.flush()
        if self.wandb_run is not None and means:
            self.wandb_run.log(means, step=step)
        self._values.clear()
        return means

    def write_now(self, values: Dict[str, float], step: int) -> None:
        """Write ``values`` at ``step`` at once, apart from the accumulated means (e.g. an evaluation)."""
        if self.writer is not None:
            for tag, value in values.items():
                self.writer.add_scalar(tag, value, step)
            self.writer.flush()
        if self.wandb_run is not None and values:
            self.wandb_run.log(dict(values), step=step)

    def close(self) -> None:
        """Flush and close the writers."""
        if self.writer is not None:
            self.writer.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()


def _plain(value: Any) -> Any:
    """A copy of a config with classes and other objects replaced by their names."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return getattr(value, "__name__", repr(value))
