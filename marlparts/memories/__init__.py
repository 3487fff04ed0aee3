"""Memories: preallocated tensor storage for rollouts and replay."""

from marlparts.memories.base import Memory
from marlparts.memories.random import RandomMemory

__all__ = ["Memory", "RandomMemory"]
