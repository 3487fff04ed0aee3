"""The process of one run given as a function: ``python -m marlparts.benchmark.child module:name FIELDS_JSON``.

It imports ``module``, calls ``name(**fields)`` (``task``, ``seed``, ``timesteps``, ``directory``,
``evaluations``, ``eval_episodes``) and exits with status 0 when the call returns.
"""

import importlib
import json
import sys
from typing import Callable


def load_function(reference: str) -> Callable:
    """The function that ``"module:name"`` names (``name`` may be dotted: ``Class.method``)."""
    module_name, _, attribute = reference.partition(":")
    try:
        target = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"cannot import the module {module_name!r} of {reference!r}: {error}") from error
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"the module {module_name!r} has no {attribute!r} (from {reference!r})")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{reference!r} is not callable")
    return target


def main() -> None:
    """Call the function of ``sys.argv[1]`` with the keyword arguments of ``sys.argv[2]``."""
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m marlparts.benchmark.child module:name FIELDS_JSON")
    load_function(sys.argv[1])(**json.loads(sys.argv[2]))


if __name__ == "__main__":
    main()
