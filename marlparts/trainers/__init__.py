"""Trainers: the loop that connects an environment to algorithms."""

from marlparts.trainers.base import EpisodeStatistics, Trainer
from marlparts.trainers.callbacks import Callback, EarlyStopping
from marlparts.trainers.sequential import SEQUENTIAL_TRAINER_DEFAULT_CONFIG, SequentialTrainer

__all__ = ["Callback", "EarlyStopping", "EpisodeStatistics", "SEQUENTIAL_TRAINER_DEFAULT_CONFIG", "SequentialTrainer",
           "Trainer"]
