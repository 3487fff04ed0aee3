"""Level-Based Foraging's legal moves, per player, and its own end, read off the env's public grid and players.

LBF (``lbforaging``) turns a move it refuses (into food, a wall or off the grid; loading with no food
next to the player) into doing nothing. A policy that keeps choosing such a move stands still for
the rest of the episode: a greedy policy can deadlock for good. LBF's own ``get_valid_actions()``
lists the *joint* legal actions, every combination of the players' moves, whose number grows
exponentially with the players; here each player's legal moves are computed on their own, with
LBF's rules (``ForagingEnv._is_valid_action``): the cost is a few array lookups per player.
"""

from typing import Any

import numpy as np

LBF_ACTIONS = 6
"""LBF's actions: none, north, south, west, east, load."""


def is_lbf(env: Any) -> bool:
    """Whether ``env`` (or the env it wraps) is LBF's ``ForagingEnv``."""
    base = getattr(env, "unwrapped", env)
    return type(base).__module__.startswith("lbforaging") and hasattr(base, "field") and hasattr(base, "players")


def lbf_food_all_collected(env: Any) -> bool:
    """Whether a Level-Based Foraging env's episode ended for its own reason: no food is left on its field."""
    return not getattr(env, "unwrapped", env).field.any()


def lbf_action_masks(env: Any) -> np.ndarray:
    """Each player's legal moves ``(players, 6)`` (True: legal), in LBF's action order: none (always), north,
    south, west, east (onto an empty cell of the grid: no food there; other players do not block a move,
    they collide), load (food on a neighbouring cell).
    """
    base = getattr(env, "unwrapped", env)
    field = base.field
    last_row, last_column = field.shape[0] - 1, field.shape[1] - 1
    rows, columns = np.array([player.position for player in base.players], dtype=np.int64).T
    above, below = np.maximum(rows - 1, 0), np.minimum(rows + 1, last_row)
    left, right = np.maximum(columns - 1, 0), np.minimum(columns + 1, last_column)
    masks = np.ones((rows.shape[0], LBF_ACTIONS), dtype=bool)
    masks[:, 1] = (rows > 0) & (field[above, columns] == 0)
    masks[:, 2] = (rows < last_row) & (field[below, columns] == 0)
    masks[:, 3] = (columns > 0) & (field[rows, left] == 0)
    masks[:, 4] = (columns < last_column) & (field[rows, right] == 0)
    # LBF's adjacent food: the neighbours' food, clamped at the border (where it reads the player's own, empty, cell)
    masks[:, 5] = (field[above, columns] + field[below, columns] + field[rows, left] + field[rows, right]) > 0
    return masks
