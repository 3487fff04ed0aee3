"""marlparts: composable parts for multi-agent reinforcement learning on PyTorch."""

__version__ = "0.1.0"
