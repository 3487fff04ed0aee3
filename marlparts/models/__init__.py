"""Models and the mixins that make them policies or value functions."""

from marlparts.models.activations import Tanh
from marlparts.models.base import Model, mlp
from marlparts.models.categorical import CategoricalMixin
from marlparts.models.deterministic import DeterministicMixin
from marlparts.models.gaussian import GaussianMixin

__all__ = ["CategoricalMixin", "DeterministicMixin", "GaussianMixin", "Model", "Tanh", "mlp"]
