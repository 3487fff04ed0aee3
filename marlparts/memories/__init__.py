"""Memories: preallocated tensor storage for rollouts and replay."""

from marlparts.memories.base import InexactSampleError, Memory
from marlparts.memories.random import RandomMemory

__all__ = ["InexactSampleError", "Memory", "RandomMemory"]
