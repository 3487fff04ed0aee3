"""Helpers shared by the parts: spaces, seeding, configuration, tracking, per-agent tensors.

The names below load their modules (and PyTorch) at first use, so that the parts that need no PyTorch, such as
the benchmark grid's runner and report (``python -m marlparts.benchmark``), can use :mod:`marlparts.utils.files`
without importing it: each run a Ray worker takes would otherwise import PyTorch for nothing.
"""

import importlib
import importlib.util
from typing import Any

_MODULE_OF = {"AgentLayout": "agent_tensors", "AgentTensors": "agent_tensors", "stack_agents": "agent_tensors",
              "unstack_agents": "agent_tensors", "with_own_actions": "agent_tensors", "set_seed": "seeding"}

__all__ = ["AgentLayout", "AgentTensors", "set_seed", "stack_agents", "unstack_agents", "with_own_actions"]


def __getattr__(name: str) -> Any:
    """One of :data:`__all__`, imported from its module at first use; or a submodule (``marlparts.utils.seeding``
    after a bare ``import marlparts.utils``, as the eager imports allowed).
    """
    if name not in _MODULE_OF:
        if importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module 'marlparts.utils' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"marlparts.utils.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    """The module's names, those not yet loaded included (for ``dir()`` and completion)."""
    return sorted(set(globals()) | set(__all__))
