"""Uniform replay memory."""

from marlparts.memories.base import Memory


class RandomMemory(Memory):
    """A :class:`Memory` used as rollout storage (``sample_all``) or uniform replay (``sample``).

    On-policy algorithms read every sample once per epoch through ``sample_all``;
    off-policy algorithms draw uniform batches with ``sample``.
    """
