"""Configuration dictionaries with defaults: deep merge, type checks, per-agent values.

Unknown keys are an error. Keys whose name ends in ``_kwargs`` hold free-form keyword
arguments for a class chosen by another key (a noise, a scheduler, a preprocessor): a value
given for them replaces the default whole instead of being merged into it.
"""

import copy
import difflib
import math
import numbers
from dataclasses import dataclass
from typing import Any, Collection, Dict, Mapping, Optional, Sequence, Tuple


def _closest(word: str, choices: Collection[str]) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f"; did you mean {close[0]!r}?" if close else f"; valid keys: {sorted(map(str, choices))}"


def merge_config(defaults: Mapping[str, Any], overrides: Mapping[str, Any], *, path: str = "cfg") -> dict:
    """Return ``defaults`` deep-updated with ``overrides``.

    A key of ``overrides`` that ``defaults`` does not have raises ``KeyError`` naming the
    key, where it is, and the closest valid key. Sub-dictionaries of the defaults are
    merged recursively, except ``*_kwargs`` dictionaries, which are replaced; any other
    value is replaced. Choosing another class for a key ``K`` that has a ``K_kwargs``
    (``noise``, ``learning_rate_scheduler``, ...) without giving ``K_kwargs`` empties them.
    """
    merged = copy.deepcopy(dict(defaults))
    for key, value in (overrides or {}).items():
        if key not in merged:
            raise KeyError(f"unknown config key {path}[{key!r}]{_closest(key, merged)}")
        arguments = f"{key}_kwargs"
        if arguments in merged and arguments not in overrides and value is not defaults[key]:
            merged[arguments] = {}  # another class: the default's keyword arguments are not its own
        nested = isinstance(merged[key], dict) and merged[key] and not str(key).endswith("_kwargs")
        if nested and isinstance(value, Mapping):
            merged[key] = merge_config(merged[key], value, path=f"{path}[{key!r}]")
        else:
            merged[key] = copy.deepcopy(value) if isinstance(value, (dict, list)) else value
    return merged


def _check_value(where: str, value: Any, default: Any) -> None:
    """Raise ``TypeError`` when ``value`` is not of the kind its ``default`` is (numbers, ints, bools)."""
    if isinstance(default, bool):
        ok, kind = isinstance(value, bool), "a bool"
    elif isinstance(default, int):
        ok, kind = isinstance(value, int) and not isinstance(value, bool), "an int"
    elif isinstance(default, float):
        ok, kind = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
    else:  # strings ("auto" or a number), classes, None and dicts take what their users check
        return
    if not ok:
        raise TypeError(f"{where} must be {kind}, got {value!r} ({type(value).__name__})")


def check_config(cfg: Mapping[str, Any], defaults: Mapping[str, Any], *, possible_agents: Sequence[str],
                 per_agent_keys: Collection[str], path: str = "cfg") -> None:
    """Check the types of ``cfg`` against ``defaults`` and its per-agent values against the agent ids.

    A value given as ``{agent_id: value}`` is allowed only for ``per_agent_keys``; it must name
    every agent of ``possible_agents`` and no other. Numbers, ints and bools must be of the
    kind their default is (``learning_rate="3e-4"`` is an error here, not deep in torch).

    Raises:
        ValueError: a per-agent value for a key that takes one value for every agent.
        KeyError: a per-agent value with an unknown (misspelled) or missing agent id.
        TypeError: a value of the wrong type.
    """
    agents = list(possible_agents)
    for key, value in cfg.items():
        default, where = defaults.get(key), f"{path}[{key!r}]"
        if isinstance(default, dict):
            if default and not str(key).endswith("_kwargs") and isinstance(value, Mapping):
                check_config(value, default, possible_agents=agents, per_agent_keys=(), path=where)
            continue
        if not isinstance(value, Mapping):
            _check_value(where, value, default)
            continue
        if key not in per_agent_keys:
            allowed = sorted(per_agent_keys) or "none"
            raise ValueError(f"{where} is given as a dict, but it takes one value for every agent; "
                             f"the keys that take per-agent values {{agent_id: value}} are: {allowed}")
        unknown = [uid for uid in value if uid not in agents]
        if unknown:
            hint = _closest(unknown[0], agents).replace("valid keys", "possible agents")
            raise KeyError(f"{where} has values for unknown agent id(s) {unknown}{hint} (possible agents: {agents})")
        missing = [uid for uid in agents if uid not in value]
        if missing:
            raise KeyError(f"{where} is given per agent but has no value for {missing}")
        for uid, agent_value in value.items():
            _check_value(f"{where}[{uid!r}]", agent_value, default)


@dataclass(frozen=True)
class Allowed:
    """The values a numeric setting takes: a finite number (``integer``: a whole one) from ``low`` to ``high``
    (an end left out where ``open_low`` / ``open_high``), or one of the ``words`` (``"auto"``, ``None``).

    ``Allowed(0, 1)`` is ``[0, 1]``, ``Allowed(0, open_low=True)`` is ``> 0``, ``Allowed(1, integer=True)``
    is a whole number ``>= 1``.
    """

    low: Optional[float] = None
    high: Optional[float] = None
    open_low: bool = False
    open_high: bool = False
    integer: bool = False
    words: Tuple[Any, ...] = ()

    def describe(self) -> str:
        """What the setting takes, in words: ``"a number in [0, 1]"``, ``"'auto' or a whole number >= 1"``."""
        kind = "a whole number" if self.integer else "a number"
        if self.low is not None and self.high is not None:
            bounds = f" in {'(' if self.open_low else '['}{self.low:g}, {self.high:g}{')' if self.open_high else ']'}"
        elif self.low is not None:
            bounds = f" {'>' if self.open_low else '>='} {self.low:g}"
        elif self.high is not None:
            bounds = f" {'<' if self.open_high else '<='} {self.high:g}"
        else:
            bounds = ""
        return " or ".join([repr(word) for word in self.words] + [kind + bounds])

    def check(self, where: str, value: Any) -> None:
        """Raise naming ``where`` and ``value`` unless ``value`` is allowed: ``TypeError`` for a value that is
        not a number (or not a whole one where one is needed), ``ValueError`` for one out of range or not finite.
        """
        if any(value is word or (isinstance(word, str) and value == word) for word in self.words):
            return
        whole = isinstance(value, numbers.Integral)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or (self.integer and not whole):
            raise TypeError(f"{where} must be {self.describe()}, got {value!r} ({type(value).__name__})")
        if not whole and not math.isfinite(value):
            raise ValueError(f"{where} must be {self.describe().replace('a number', 'a finite number')}, got {value!r}")
        below = self.low is not None and (value <= self.low if self.open_low else value < self.low)
        above = self.high is not None and (value >= self.high if self.open_high else value > self.high)
        if below or above:
            raise ValueError(f"{where} must be {self.describe()}, got {value!r}")


def check_ranges(cfg: Mapping[str, Any], ranges: Mapping[str, Any], *, path: str = "cfg") -> None:
    """Check every setting of ``cfg`` that ``ranges`` names against its :class:`Allowed` values.

    ``ranges`` maps a key to an :class:`Allowed`, or to a dict of ranges for a nested section
    (``"experiment"``); keys ``cfg`` does not have are skipped. A value given per agent
    (``{agent_id: value}``) is checked agent by agent, and an error names the agent.

    Raises:
        TypeError: a value that is not a number, or not a whole one where one is needed.
        ValueError: a number out of its range, or not finite.
    """
    for key, allowed in ranges.items():
        if key not in cfg:
            continue
        value, where = cfg[key], f"{path}[{key!r}]"
        if isinstance(allowed, Mapping):
            if isinstance(value, Mapping):
                check_ranges(value, allowed, path=where)
        elif isinstance(value, Mapping):  # per agent
            for uid, agent_value in value.items():
                allowed.check(f"{where}[{uid!r}]", agent_value)
        else:
            allowed.check(where, value)


def agent_value(cfg: Mapping[str, Any], key: str, uid: str) -> Any:
    """The value of ``cfg[key]`` for agent ``uid``: the per-agent entry, or the one value for all."""
    value = cfg[key]
    return value[uid] if isinstance(value, Mapping) and uid in value else value


def agreed_value(cfg: Mapping[str, Any], key: str, uids: Sequence[str], what: str) -> Any:
    """The value of ``cfg[key]`` that every agent of ``uids`` has; ``ValueError`` naming ``what`` if they differ."""
    values: Dict[str, Any] = {uid: agent_value(cfg, key, uid) for uid in uids}
    if len({repr(v) for v in values.values()}) > 1:
        raise ValueError(f"cfg[{key!r}] differs within {what}: {values}")
    return values[uids[0]]


class Config(dict):
    """A configuration dict whose :meth:`copy` is deep.

    ``MAPPO_DEFAULT_CONFIG.copy()`` then gives a config whose nested dicts (``"experiment"``)
    can be edited without changing the defaults.
    """

    def copy(self) -> "Config":
        """A deep copy."""
        return Config(copy.deepcopy(dict(self)))
