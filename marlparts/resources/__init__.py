"""Preprocessors, learning-rate schedulers and exploration noises used by the algorithms."""

from marlparts.resources.noises import GaussianNoise, Noise, OrnsteinUhlenbeckNoise, linear_scale
from marlparts.resources.popart import PopArt, value_output_layer
from marlparts.resources.preprocessors import RunningStandardScaler
from marlparts.resources.schedulers import KLAdaptiveLR

__all__ = ["GaussianNoise", "KLAdaptiveLR", "Noise", "OrnsteinUhlenbeckNoise", "PopArt", "RunningStandardScaler", "linear_scale",
           "value_output_layer"]
