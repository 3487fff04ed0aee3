"""Preprocessors and learning-rate schedulers used by the algorithms."""

from marlparts.resources.preprocessors import RunningStandardScaler
from marlparts.resources.schedulers import KLAdaptiveLR

__all__ = ["KLAdaptiveLR", "RunningStandardScaler"]
