"""One optimizer step over the records of trained models: gradients averaged over ranks, clipped, scaled."""

import contextlib
import warnings
from typing import Any, Optional, Sequence

import torch

from marlparts.agents.common.trained_model import TrainedModel
from marlparts.utils.distributed import average_gradients


class OptimizationMixin:
    """The optimizer step every algorithm's update ends with, and CUDA mixed precision around it. Part of
    :class:`~marlparts.agents.MultiAgent`, which sets ``cfg``, ``device`` and ``_grad_scaler``
    (from :meth:`_make_grad_scaler`).
    """

    def optimize(self, records: Sequence[TrainedModel], loss: torch.Tensor) -> None:
        """One optimizer step for each of ``records`` that takes steps in this update (``record.takes_steps``,
        see :meth:`~marlparts.agents.common.trained_model.TrainedModel.plan_steps`) on ``loss``: zero, backward,
        average the gradients over ``torchrun`` ranks (one all-reduce), clip the gradient norm, step
        (:meth:`~marlparts.agents.common.trained_model.TrainedModel.step`; a stack steps only the members whose
        agents acted). With mixed precision the loss is scaled and the gradients unscaled before clipping.
        With no record to step there is nothing to do, and no backward pass is run.
        """
        for record in records:
            record.zero_gradients()  # also those that take no step: nothing accumulates in them
        records = [record for record in records if record.takes_steps]
        if not records:
            return
        scaler = self._grad_scaler
        (scaler.scale(loss) if scaler is not None else loss).backward()
        average_gradients(parameter for record in records for parameter in record.model.parameters())
        for record in records:
            record.step(scaler)
        if scaler is not None:
            scaler.update()

    def autocast(self) -> Any:
        """The context the update's forward passes run in: CUDA autocast to float16 with
        ``cfg["mixed_precision"]`` on a CUDA device, else nothing.
        """
        if self._grad_scaler is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type="cuda", dtype=torch.float16)

    def _make_grad_scaler(self) -> Optional[Any]:
        if not self.cfg.get("mixed_precision", False):
            return None
        if self.device.type != "cuda":
            warnings.warn(f"cfg['mixed_precision'] is True but {type(self).__name__} runs on {self.device}: mixed "
                          "precision is a CUDA feature, so training goes on in float32", RuntimeWarning, stacklevel=3)
            return None
        return torch.amp.GradScaler("cuda")
