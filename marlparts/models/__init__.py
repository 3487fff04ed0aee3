"""Models and the mixins that make them policies or value functions."""

from marlparts.models.activations import Tanh, choose_tanh_kernel, tanh, tanh_kernel
from marlparts.models.agent_sets import AgentSetLayer, DeepSets
from marlparts.models.base import Model, mlp
from marlparts.models.categorical import CategoricalMixin
from marlparts.models.convolutional import cnn
from marlparts.models.deterministic import DeterministicMixin
from marlparts.models.gaussian import GaussianMixin
from marlparts.models.graph import AgentGraph
from marlparts.models.mixers import QMixer
from marlparts.models.recurrent import RecurrentMixin
from marlparts.models.squashed_gaussian import SquashedGaussianMixin

__all__ = ["AgentGraph", "AgentSetLayer", "CategoricalMixin", "DeepSets", "DeterministicMixin", "GaussianMixin",
           "Model", "QMixer", "RecurrentMixin", "SquashedGaussianMixin", "Tanh", "choose_tanh_kernel", "cnn", "mlp",
           "tanh", "tanh_kernel"]
