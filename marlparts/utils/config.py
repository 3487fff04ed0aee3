"""Configuration dictionaries with defaults: deep merge, unknown keys are an error."""

import copy
import difflib
from typing import Any, Mapping


def merge_config(defaults: Mapping[str, Any], overrides: Mapping[str, Any], *, path: str = "cfg") -> dict:
    """Return ``defaults`` deep-updated with ``overrides``.

    A key of ``overrides`` that ``defaults`` does not have raises ``KeyError`` naming the
    key, where it is, and the closest valid key. Sub-dictionaries of the defaults are
    merged recursively; any other value is replaced.
    """
    merged = copy.deepcopy(dict(defaults))
    for key, value in (overrides or {}).items():
        if key not in merged:
            close = difflib.get_close_matches(str(key), [str(k) for k in merged], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {sorted(merged)}"
            raise KeyError(f"unknown config key {path}[{key!r}]{hint}")
        if isinstance(merged[key], dict) and isinstance(value, Mapping) and merged[key]:
            merged[key] = merge_config(merged[key], value, path=f"{path}[{key!r}]")
        else:
            merged[key] = copy.deepcopy(value) if isinstance(value, (dict, list)) else value
    return merged


class Config(dict):
    """A configuration dict whose :meth:`copy` is deep.

    ``MAPPO_DEFAULT_CONFIG.copy()`` then gives a config whose nested dicts (``"experiment"``)
    can be edited without changing the defaults.
    """

    def copy(self) -> "Config":
        """A deep copy."""
        return Config(copy.deepcopy(dict(self)))
