"""Stepping a block of PettingZoo Parallel env copies into preallocated NumPy buffers.

The same :class:`CopyBlock` runs all copies in the main process (:class:`InProcessCopies`), or a
slice of them in each worker process (:mod:`marlparts.envs.workers`), where the buffers live in
shared memory.
"""

import traceback
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

import gymnasium
import numpy as np

from marlparts.envs.layout import EnvLayout
from marlparts.envs.misfits import (
    flag_error,
    mask_size_error,
    missing_observation_error,
    observation_error,
    reward_error,
    size_error,
)
from marlparts.utils.seeding import derived_seed
from marlparts.utils.spaces import flatten_into

BUFFER_DTYPES = {
    "obs": np.float32, "final_obs": np.float32, "reward": np.float32, "terminated": np.bool_,
    "truncated": np.bool_, "active": np.bool_, "episode_end": np.bool_, "state": np.float32,
    "final_state": np.float32, "mask": np.bool_, "final_mask": np.bool_, "action": np.float64, "failed": np.bool_,
    "env_info": np.float32,
}


class EnvCopyError(RuntimeError):
    """An environment copy raised inside ``reset`` or ``step``; the message names the copy."""


class CopyFailure(NamedTuple):
    """A copy that raised and was rebuilt: its ``row``, ``what`` it was doing (``"step"``, ``"reset"``), the
    error's text with its traceback, and the exception itself where it was raised in this process.
    """

    row: int
    what: str
    message: str
    error: Optional[BaseException]


class _CopyRaised(Exception):
    """Raised inside :class:`CopyBlock` when the env of ``row`` raised while doing ``what``; ``episode_over``
    when the episode under way had already ended whole (the reset, or reading the state, after it raised).
    """

    def __init__(self, row: int, what: str, error: BaseException, *, episode_over: bool = False) -> None:
        super().__init__(f"env copy {row} raised in {what}: {error!r}")
        self.row, self.what, self.error, self.episode_over = row, what, error, episode_over


def buffer_shapes(layout: EnvLayout, num_envs: int) -> Dict[str, tuple]:
    """Shape of every buffer for ``num_envs`` copies."""
    n = len(layout.possible_agents)
    shapes = {
        "obs": (num_envs, layout.observations.total), "final_obs": (num_envs, layout.observations.total),
        "reward": (num_envs, n), "terminated": (num_envs, n), "truncated": (num_envs, n),
        "active": (num_envs, n), "episode_end": (num_envs, 1), "action": (num_envs, layout.actions.total),
        "failed": (num_envs, 1),
    }
    shapes["final_state"] = (num_envs, layout.state_size)
    if layout.state_from_env:
        shapes["state"] = (num_envs, layout.state_size)
    if layout.has_masks:
        shapes["mask"] = (num_envs, layout.masks.total)
        shapes["final_mask"] = (num_envs, layout.masks.total)
    if layout.info_keys:
        shapes["env_info"] = (num_envs, len(layout.info_keys), n)
    return shapes


def allocate_buffers(layout: EnvLayout, num_envs: int, *, shared: bool, context: Any = None) -> Dict[str, Any]:
    """Buffers as NumPy arrays, or as shared ``RawArray`` objects to pass to worker processes."""
    buffers = {}
    for name, shape in buffer_shapes(layout, num_envs).items():
        dtype = np.dtype(BUFFER_DTYPES[name])
        if shared:
            buffers[name] = context.RawArray("b", int(np.prod(shape)) * dtype.itemsize)
        else:
            buffers[name] = np.zeros(shape, dtype=dtype)
    return buffers


def as_arrays(raw: Dict[str, Any], layout: EnvLayout, num_envs: int) -> Dict[str, np.ndarray]:
    """NumPy views of shared ``RawArray`` buffers."""
    shapes = buffer_shapes(layout, num_envs)
    return {name: np.frombuffer(raw[name], dtype=BUFFER_DTYPES[name]).reshape(shapes[name]) for name in raw}


class CopyBlock:
    """Env copies ``rows`` of a batch, reading actions from and writing results to ``buffers``.

    A copy that raises inside ``step`` or ``reset`` (its own code, not a check of this block) is, with
    ``factory`` given, closed and rebuilt, and the new copy reset: its row is marked ``failed`` and
    ``episode_end``, the episode it was playing is over, and the step's results for it are the new
    episode's first observations (zero rewards, no termination). Without ``factory`` the error is
    raised as :class:`EnvCopyError`.

    Args:
        envs: the PettingZoo Parallel env copies, one per row.
        rows: the batch rows these copies own.
        layout: spaces and column layouts.
        buffers: the whole batch's NumPy buffers.
        factory: builds a new copy in place of one that failed (None: failures are raised).
        rebuild_seed: the seed the resets of rebuilt copies are drawn from (None: unseeded): the ``n``-th
            rebuild of row ``r`` resets with ``derived_seed(rebuild_seed, r, n)``, whichever block holds the row.
        rebuilds: how many times each row was rebuilt before (a block started again in a new worker process
            goes on counting).
    """

    def __init__(self, envs: List[Any], rows: Sequence[int], layout: EnvLayout, buffers: Dict[str, np.ndarray],
                 factory: Optional[Callable[[], Any]] = None, rebuild_seed: Optional[int] = None,
                 rebuilds: Optional[Dict[int, int]] = None) -> None:
        self.envs = envs
        self.factory = factory
        self.rebuild_seed = rebuild_seed
        self.rebuilds = {int(row): 0 for row in rows}
        self.rebuilds.update(rebuilds or {})
        self.rows = list(rows)
        self.layout = layout
        self.b = buffers
        self.agent_index = {uid: i for i, uid in enumerate(layout.possible_agents)}
        self.obs_columns = {uid: layout.observations.columns(uid) for uid in layout.possible_agents}
        self.action_columns = {uid: layout.actions.columns(uid) for uid in layout.possible_agents}
        self.mask_columns = {uid: layout.masks.columns(uid) for uid in layout.possible_agents} if layout.has_masks else {}
        self.frames: Optional[List[Any]] = None  # frames of the block's first copy while recording

    def reset(self, seeds: Optional[Sequence[Optional[int]]]) -> List[CopyFailure]:
        """Reset every copy; copy ``row`` gets ``seeds[row]`` when seeds are given. The copies that raised
        and were rebuilt are returned.
        """
        failures = []
        for index, (env, row) in enumerate(zip(self.envs, self.rows)):
            self.b["failed"][row] = False
            try:
                self._reset_copy(env, row, None if seeds is None else seeds[row])
            except _CopyRaised as raised:
                failures.append(self._rebuild(index, raised))
                self.b["failed"][row] = False  # no episode was under way
                self.b["episode_end"][row] = False
        return failures

    def step(self) -> List[CopyFailure]:
        """Step every copy with the actions in the action buffer; ended copies reset themselves. The
        copies that raised and were rebuilt are returned.
        """
        failures = []
        for index, (env, row) in enumerate(zip(self.envs, self.rows)):
            self.b["failed"][row] = False
            try:
                self._step_copy(env, row)
            except _CopyRaised as raised:
                # a reset that raises comes after an episode that ended whole: its results stay
                failures.append(self._rebuild(index, raised, episode_over=raised.episode_over))
        return failures

    def _reset_copy(self, env: Any, row: int, seed: Optional[int], *, clear: bool = True) -> None:
        try:
            obs, infos = env.reset(seed=seed)
        except Exception as error:
            raise _CopyRaised(row, "reset", error) from error
        self._check_spaces(env, row)
        if clear:
            self._clear_step_flags(row)
        self._write_observations(env, row, obs, infos, ended=(), after_reset=True)

    def _rebuild(self, index: int, raised: _CopyRaised, *, episode_over: bool = False) -> CopyFailure:
        """Close the copy that raised, build and reset a new one in its place. Its row ends its episode, as
        failed unless ``episode_over`` (the episode had ended whole, and the reset after it raised): then the
        step's results (rewards, flags, final observations) are kept.
        """
        row = raised.row
        if self.factory is None:
            raise EnvCopyError(str(raised)) from raised.error
        message = f"{raised}\n{''.join(traceback.format_exception(raised.error))}"
        try:
            self.envs[index].close()
        except Exception:  # a broken copy may fail to close: it is dropped all the same
            pass
        self.rebuilds[row] += 1
        env = self.envs[index] = self.factory()
        seed = derived_seed(self.rebuild_seed, row, self.rebuilds[row])
        try:
            self._reset_copy(env, row, seed, clear=not episode_over)
        except _CopyRaised as again:
            raise EnvCopyError(f"env copy {row} was rebuilt after it raised in {raised.what}, and the new copy raised "
                               f"in reset: {again.error!r}") from again.error
        self.b["episode_end"][row] = True
        self.b["failed"][row] = not episode_over
        return CopyFailure(row, raised.what, message, raised.error)

    def _step_copy(self, env: Any, row: int) -> None:
        """Step one copy (and reset it if its episode ended); raises :class:`_CopyRaised` if the env raised."""
        actions = {uid: self._action(row, uid) for uid in env.agents}
        try:
            obs, rewards, terminated, truncated, infos = env.step(actions)
        except Exception as error:
            raise _CopyRaised(row, "step", error) from error
        if self.frames is not None and env is self.envs[0]:
            self.frames.append(env.render())  # before an ended episode's reset: its last frame
        self._clear_step_flags(row)
        if "env_info" in self.b:
            self._write_env_infos(row, infos)
        reward_row, term_row, trunc_row = self.b["reward"][row], self.b["terminated"][row], self.b["truncated"][row]
        index, agents = self.agent_index, self.layout.possible_agents
        try:
            for uid, value in rewards.items():
                reward_row[index[uid]] = value
        except (KeyError, TypeError, ValueError):
            raise reward_error(rewards, row, agents) from None
        ended = []
        try:
            for uid, flag in terminated.items():
                if flag:
                    term_row[index[uid]] = True
                    ended.append(uid)
        except KeyError:
            raise flag_error("a termination flag", terminated, row, agents) from None
        try:
            for uid, flag in truncated.items():
                if flag:
                    trunc_row[index[uid]] = True
                    if not terminated.get(uid, False):
                        ended.append(uid)
        except KeyError:
            raise flag_error("a truncation flag", truncated, row, agents) from None
        if not env.agents:
            self._write_observations(env, row, obs, infos, ended=set(obs), after_reset=False)
            self._write_final_state(row)
            self.b["episode_end"][row] = True
            try:
                obs, infos = env.reset()
            except Exception as error:
                raise _CopyRaised(row, "reset", error, episode_over=True) from error
            self._check_spaces(env, row)
            self._write_observations(env, row, obs, infos, ended=(), after_reset=True)
        else:
            self._write_observations(env, row, obs, infos, ended=ended, after_reset=False)
            if ended:
                self._write_final_state(row)

    def render(self) -> Any:
        """Render the first copy of the block."""
        return self.envs[0].render()

    def start_recording(self) -> None:
        """Keep a frame of the first copy now and after each step (an ended episode's last frame
        included, taken before the copy resets).
        """
        frame = self.envs[0].render()
        if not isinstance(frame, np.ndarray) or frame.ndim != 3:
            raise ValueError("recording a video needs env copies that render RGB arrays: build them with "
                             "render_mode='rgb_array' (e.g. simple_spread_v3.parallel_env(render_mode='rgb_array')); "
                             f"render() returned {type(frame).__name__}")
        self.frames = [frame]

    def stop_recording(self) -> List[Any]:
        """Stop recording and hand out the frames."""
        frames, self.frames = self.frames or [], None
        return frames

    def close(self) -> None:
        """Close every copy; then, if some raised in ``close``, raise :class:`EnvCopyError` naming them."""
        errors = []
        for env, row in zip(self.envs, self.rows):
            try:
                env.close()
            except Exception as error:  # the other copies are closed all the same
                errors.append(f"env copy {row} raised in close: {error!r}")
        if errors:
            raise EnvCopyError("\n".join(errors))

    def _action(self, row: int, uid: str) -> Any:
        space = self.layout.env_action_spaces[uid]
        values = self.b["action"][row, self.action_columns[uid]]
        if isinstance(space, gymnasium.spaces.Discrete):
            return int(values[0]) + self.layout.action_starts[uid]
        if isinstance(space, gymnasium.spaces.MultiDiscrete):
            return values.astype(np.int64).reshape(space.shape) + self.layout.action_starts[uid]
        return np.clip(values.reshape(space.shape), space.low, space.high).astype(space.dtype)

    def _check_spaces(self, env: Any, row: int) -> None:
        """Raise ``ValueError`` if a reset changed an agent's spaces: the buffers are laid out for the first ones."""
        layout = self.layout
        for uid in layout.possible_agents:
            for kind, known, now in (("observation", layout.raw_observation_spaces[uid], env.observation_space(uid)),
                                     ("action", layout.env_action_spaces[uid], env.action_space(uid))):
                if now is not known and now != known:
                    raise ValueError(f"env copy {row} changed the {kind} space of agent {uid!r} at a reset, from {known} "
                                     f"to {now}; the spaces of every agent must stay the same for the whole run")

    def _clear_step_flags(self, row: int) -> None:
        self.b["reward"][row] = 0.0
        self.b["terminated"][row] = False
        self.b["truncated"][row] = False
        self.b["episode_end"][row] = False
        self.b["final_obs"][row] = 0.0
        self.b["final_state"][row] = 0.0
        if "final_mask" in self.b:
            self.b["final_mask"][row] = True
        if "env_info" in self.b:
            self.b["env_info"][row] = 0.0

    def _write_env_infos(self, row: int, infos: Dict[str, Any]) -> None:
        """The step's value of each of the layout's ``info_keys`` in each agent's infos (0 where absent)."""
        target, index = self.b["env_info"][row], self.agent_index
        for uid, info in infos.items():
            if uid not in index or not isinstance(info, dict):
                continue
            for k, key in enumerate(self.layout.info_keys):
                if key in info:
                    try:
                        target[k, index[uid]] = float(info[key])
                    except (TypeError, ValueError) as error:
                        raise ValueError(f"info_keys: the infos of agent {uid!r} in env copy {row} hold {key!r} = "
                                         f"{info[key]!r}, which is not a number") from error

    def _write_final_state(self, row: int) -> None:
        """The global state at the step where some agent's episode ended: the env's state after the
        step, or every observation concatenated with the final ones of the agents that ended.
        """
        if "state" in self.b:
            self.b["final_state"][row] = self.b["state"][row]
        else:  # ended agents' observation columns are zero in "obs" and hold their final one in "final_obs"
            np.add(self.b["obs"][row], self.b["final_obs"][row], out=self.b["final_state"][row])

    def _write_observations(self, env: Any, row: int, obs: Dict[str, Any], infos: Dict[str, Any], ended: Any, *,
                            after_reset: bool) -> None:
        """Write ``obs`` of ``row``: agents that ``ended`` go to the final-observation buffer; and the env's
        state, where it has one (``after_reset``: the state of a new episode, the one before having ended whole).

        Agents absent from ``obs`` (they left the episode) keep zero observations. A ``state()`` that raises
        fails the copy as ``step`` and ``reset`` do.
        """
        layout, obs_row = self.layout, self.b["obs"][row]
        obs_row[:] = 0.0
        live = set(env.agents)
        if not live <= obs.keys():  # an agent that plays on needs an observation to act on
            raise missing_observation_error(live, obs, row, layout.possible_agents)
        active_row = self.b["active"][row]
        for j, uid in enumerate(layout.possible_agents):
            active_row[j] = uid in live
        try:
            for uid, value in obs.items():
                if layout.mask_in_observation:
                    value = value["observation"]
                columns = self.obs_columns[uid]
                if uid in ended:
                    flatten_into(layout.observation_spaces[uid], value, self.b["final_obs"][row, columns])
                    obs_row[columns] = 0.0
                else:
                    flatten_into(layout.observation_spaces[uid], value, obs_row[columns])
        except (KeyError, TypeError, ValueError) as error:
            raise observation_error(uid, row, live, layout.observation_spaces.get(uid), error,
                                    layout.possible_agents) from error
        if "state" in self.b:
            try:
                state = env.state()
            except Exception as error:
                raise _CopyRaised(row, "state()", error, episode_over=after_reset) from error
            state, target = np.asarray(state, dtype=np.float32), self.b["state"][row]
            if state.size != target.size:  # one number is not spread over the whole state
                raise size_error(f"the state() of env copy {row}", state, target.size,
                                 f"the state space {layout.state_space} holds")
            target[:] = state.reshape(-1)
        if layout.has_masks:
            self._write_masks(row, obs, infos, live, ended)

    def _write_masks(self, row: int, obs: Dict[str, Any], infos: Dict[str, Any], live: set, ended: Any) -> None:
        """Masks of the agents that act next; the masks of agents whose episode ended go to ``final_mask``
        (what was legal at their final observation, which a time limit bootstraps from).
        """
        mask_row = self.b["mask"][row]
        mask_row[:] = True  # agents that do not act get an all-allowed mask, never an empty one
        for uid, target in [(uid, mask_row) for uid in live] + [(uid, self.b["final_mask"][row]) for uid in ended]:
            mask = self._mask_of(uid, obs, infos)
            if mask is not None:
                mask, columns = np.asarray(mask, dtype=bool), self.mask_columns[uid]
                if mask.size != columns.stop - columns.start:  # one flag is not spread over every action
                    raise mask_size_error(uid, row, mask, self.layout.action_spaces[uid], columns.stop - columns.start)
                target[columns] = mask.reshape(-1)
        for uid in live:
            if not mask_row[self.mask_columns[uid]].any():
                raise ValueError(f"the action mask of agent {uid!r} in env copy {row} allows no action, but the agent "
                                 "is to act: an env must leave an acting agent at least one legal action")

    def _mask_of(self, uid: str, obs: Dict[str, Any], infos: Dict[str, Any]) -> Optional[Any]:
        if self.layout.mask_in_observation and uid in obs:
            return obs[uid]["action_mask"]
        if isinstance(infos.get(uid), dict) and "action_mask" in infos[uid]:
            return infos[uid]["action_mask"]
        return None


class InProcessCopies:
    """All copies stepped one after another in the calling process."""

    def __init__(self, envs: List[Any], layout: EnvLayout, num_envs: int,
                 factory: Optional[Callable[[], Any]] = None, rebuild_seed: Optional[int] = None) -> None:
        self.buffers = allocate_buffers(layout, num_envs, shared=False)
        self.block = CopyBlock(envs, range(num_envs), layout, self.buffers, factory, rebuild_seed)

    def reset(self, seeds: Optional[Sequence[Optional[int]]]) -> List[CopyFailure]:
        """Reset every copy (copy ``i`` with ``seeds[i]`` if given); the copies rebuilt on the way."""
        return self.block.reset(seeds)

    def step(self) -> List[CopyFailure]:
        """Step every copy; the copies rebuilt on the way."""
        return self.block.step()

    def render(self) -> Any:
        """Render copy 0."""
        return self.block.render()

    def start_recording(self) -> None:
        """Record copy 0's frames at every step."""
        self.block.start_recording()

    def stop_recording(self) -> List[Any]:
        """The frames recorded since :meth:`start_recording`."""
        return self.block.stop_recording()

    def close(self) -> None:
        """Close every copy."""
        self.block.close()
