"""A trainer that steps the environment and the algorithms one after another in one process."""

import collections
import os
import time
from typing import Any, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from marlparts.agents.base import MultiAgent
from marlparts.envs.base import MultiAgentEnv
from marlparts.trainers.base import TRAINER_CONFIG_RANGES, EpisodeStatistics, Trainer
from marlparts.trainers.evaluation import TEAM_RETURNS, collect_episodes, learning_curve_point, summarise
from marlparts.trainers.opponents import Opponents, play_alike_in_evaluation
from marlparts.trainers.progress import Progress
from marlparts.utils.distributed import all_gather_tensors, is_main_process, rank_and_world_size
from marlparts.utils.files import append_json_line, write_json_atomically
from marlparts.utils.seeding import EVALUATION_STREAM, OPPONENT_STREAM, SAMPLING_STREAM, TRAINING_STREAM, derived_seed
from marlparts.utils.video import save_video

EVAL_ACTIONS = ("greedy", "sampled", "both")

SEQUENTIAL_TRAINER_DEFAULT_CONFIG: Dict[str, Any] = {
    "timesteps": 100_000,          # vectorized steps per train() call (each steps every env copy)
    "disable_progressbar": False,  # hide the progress bar (and its lines where output is not a terminal)
    "progress_interval": 10.0,     # seconds between progress lines where output is not a terminal
    "eval_interval": 0,            # vectorized steps between evaluations during train() (0: none)
    "eval_episodes": 100,          # episodes that eval() collects
    "eval_num_envs": None,         # evaluation env copies (None: as many as the training env has)
    "eval_actions": "both",        # eval() runs "greedy" actions, "sampled" ones, or "both" (reported side by side)
    "eval_at_start": False,        # with eval_interval: also evaluate before the run's first step (see train())
    "checkpoint_at_eval": False,   # with eval_interval: write every algorithm's checkpoint at each evaluation
    "team_return": "mean",         # a team's return of an episode: the "mean" or the "sum" of its agents' returns
    "eval_video": False,           # eval() records the first episode of evaluation copy 0 (render_mode="rgb_array")
    "video_format": "mp4",         # "mp4" or "gif" (imageio: pip install 'marlparts[video]')
    "video_fps": 10.0,
    "close_environment_at_exit": False,
}


class SequentialTrainer(Trainer):
    """The loop: act, ``env.step``, ``record_transition``, ``post_interaction``.

    Several ``train()`` calls continue one run: the env copies keep their episodes (no reset
    between calls), and every algorithm's step counter, experiment folder and checkpoints go
    on. ``eval()`` runs on its own env copies (made with ``env.make_evaluation_env``, seeded
    apart from the training copies and the same at every evaluation), so evaluating between
    or during ``train()`` calls never cuts a training episode. Where no separate copies can be
    made it evaluates on the training env and the episodes in progress are cut: the last
    stored step counts as truncated and bootstraps from the observation that followed it.

    With ``eval_interval`` set, ``train()`` evaluates every ``eval_interval`` steps. With ``eval_at_start`` it
    also evaluates before its first step where that step is a multiple of ``eval_interval`` and an algorithm
    has not been evaluated at its step during training (``agent.evaluated_at``, kept in checkpoints, and
    forgotten by a run that goes on in a folder of its own): step 0, or a
    run resumed from a checkpoint written before its evaluation at that step, so that its learning curve
    holds the point even where the run was cut short during that evaluation; not a run that goes on (in
    this trainer or a new one) after an evaluation at that step. With
    ``checkpoint_at_eval`` every algorithm writes its checkpoint at each evaluation, just before it: a run
    cut short goes on from its last evaluation (load
    :func:`~marlparts.utils.run_folders.newest_checkpoint` of its folder). Each algorithm logs the result under
    ``Evaluation / ...`` and keeps ``best_agent.pt`` for its best evaluation return. Every
    evaluation writes its report to ``evaluation.json`` in the experiment folder of each algorithm
    that played in it, and appends its figures to ``evaluations.jsonl`` there: the run's learning
    curve (:mod:`marlparts.benchmark` reads it).

    The progress bar shows env steps per second (env copies × steps) and the mean return
    over agents of recently finished episodes, per team when several algorithms share the env.
    """

    DEFAULT_CONFIG = SEQUENTIAL_TRAINER_DEFAULT_CONFIG

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for key, choices in (("eval_actions", EVAL_ACTIONS), ("team_return", TEAM_RETURNS)):
            if self.cfg[key] not in choices:
                raise ValueError(f"trainer cfg['{key}'] must be one of {choices}, got {self.cfg[key]!r}")
        env = self.env
        self.statistics = EpisodeStatistics(env.possible_agents, env.num_envs, env.device)
        # the training env's (observations, states, infos) between steps and train() calls; None: reset first
        self._training_state: Optional[Tuple[Any, Any, Any]] = None
        self._training_resets = 0
        self._first_reset_step: Optional[int] = None  # the step of this trainer's first reset of the training env
        self._evaluated_on_training_env = False  # an evaluation ran on the training env (no separate copies)
        # recent episode returns of each agent, shown per seat for turn-based games
        self._recent_seats: Dict[str, Deque[float]] = {uid: collections.deque(maxlen=100)
                                                       for uid in env.possible_agents} if env.turn_based else {}

    def train(self) -> None:
        """Train for ``cfg["timesteps"]`` vectorized steps (fewer if a callback calls :meth:`stop`);
        metrics are flushed, and gradients switched back on, even if a step fails or is interrupted.
        """
        env, steps = self.env, int(self.cfg["timesteps"])
        grad_enabled = torch.is_grad_enabled()
        for agent in self.agents:
            agent.init(self.cfg)
            agent.set_mode("train")
        start, lags = self._steps_and_lags()
        end = start + steps
        eval_interval = int(self.cfg["eval_interval"])
        if eval_interval and any(lag % eval_interval for lag in lags):
            steps_of = ", ".join(f"{team} at step {agent.timestep}" for team, agent in zip(self.teams, self.agents))
            raise ValueError(f"the algorithms' step counts ({steps_of}) differ by other than a multiple of "
                             f"cfg['eval_interval'] ({eval_interval}): one evaluation serves them all, so it cannot "
                             "fall on each one's evaluation steps")
        recent: List[Deque[float]] = [collections.deque(maxlen=100) for _ in self.agents]
        began = time.perf_counter()
        self._stop_requested = False
        if eval_interval and self.cfg["eval_at_start"] and start % eval_interval == 0 \
                and any(agent.evaluated_at != agent.timestep for agent in self.agents):
            self._evaluate_during_training()
        bar = Progress(steps, disable=self.cfg["disable_progressbar"], interval=float(self.cfg["progress_interval"]))
        try:
            for timestep in range(start, end):
                if self._training_state is None:
                    self._reset_training_env(timestep)
                observations, states, infos = self._training_state
                clock = [time.perf_counter()]
                for agent, lag in zip(self.agents, lags):
                    agent.pre_interaction(timestep - lag, end - lag)
                actions = self._act(observations, states, infos, timestep, end, lags=lags)
                clock.append(time.perf_counter())
                next_observations, rewards, terminated, truncated, next_infos = env.step(actions)
                next_states = env.state()
                clock.append(time.perf_counter())
                for agent, lag in zip(self.agents, lags):
                    agent.record_transition(observations=observations, states=states, actions=actions,
                                            rewards=rewards, next_observations=next_observations,
                                            next_states=next_states, terminated=terminated, truncated=truncated,
                                            infos=next_infos, timestep=timestep - lag, timesteps=end - lag)
                self._training_state = (next_observations, next_states, next_infos)
                ends = self.statistics.step(rewards, terminated, truncated, next_infos)
                if ends.returns.shape[0]:
                    self._episodes_ended(ends.returns, ends.lengths, recent)
                    if ends.infos:
                        self.notify("on_episode_infos", ends.infos)
                if ends.any_dropped:
                    self._episodes_dropped(ends.dropped, ends.dropped_lengths)
                clock.append(time.perf_counter())
                for agent, lag in zip(self.agents, lags):
                    agent.post_interaction(timestep - lag, end - lag)
                clock.append(time.perf_counter())
                self._track_step_times(clock)
                if eval_interval and (timestep + 1) % eval_interval == 0:
                    self._evaluate_during_training()
                self.notify("on_step", timestep)
                bar.update(1)
                if (timestep - start) % 200 == 0 and all(recent):
                    self._show_progress(bar, (timestep - start + 1) * env.num_envs / (time.perf_counter() - began), recent)
                if self._stop_requested:
                    break
        finally:
            torch.set_grad_enabled(grad_enabled)  # an interrupt inside a switch of grad mode may leave it off
            bar.close()
            for agent in self.agents:
                if agent.tracker is not None:
                    agent.tracker.write(agent.timestep)
            if self.cfg["close_environment_at_exit"]:
                self._close_environments()

    def _reset_training_env(self, timestep: int) -> None:
        """Reset the training copies at ``timestep``, the episodes in progress (if any) cut first. A run's
        first reset at step 0 uses the env's own seeds; a later one (after an evaluation on this env)
        draws new ones from the run's seed and the resets so far. A run that goes on from a checkpoint
        draws every reset's seeds from the run's seed, the step it went on from and the resets so far,
        so it trains on episodes it has not seen rather than replaying the episodes the run began with.
        """
        for agent in self.agents:
            agent.cut_episodes()
        if self._first_reset_step is None:
            self._first_reset_step = timestep
        if self._first_reset_step == 0:  # a run from its start: the env's own seeds, then seeds by reset count
            if self._training_resets:
                seed = derived_seed(self.env.seed, TRAINING_STREAM, self._training_resets)
            else:  # named where an evaluation on this env reset it first (it would go on from the evaluation's)
                seed = self.env.seed if self._evaluated_on_training_env else None
        else:  # a run that went on from a checkpoint: seeds of the step it went on from
            seed = derived_seed(self.env.seed, TRAINING_STREAM, self._first_reset_step, self._training_resets)
        self._training_resets += 1
        observations, infos = self.env.reset(seed=seed)
        self._training_state = (observations, self.env.state(), infos)
        self.statistics.reset()

    def _episodes_ended(self, returns: torch.Tensor, lengths: torch.Tensor, recent: List[Deque[float]]) -> None:
        """Track ended training episodes: each algorithm its own agents' returns, and every team's mean return."""
        team_means = {team: returns[:, columns].mean(dim=1) for team, columns in zip(self.teams, self.agent_columns)}
        for column, seat_returns in enumerate(self._recent_seats.values()):
            seat_returns.extend(returns[:, column].tolist())
        for agent, columns, team_recent, team in zip(self.agents, self.agent_columns, recent, self.teams):
            agent.track_episode_returns(returns[:, columns])
            team_recent.extend(team_means[team].tolist())
            if agent.tracker is not None:
                agent.tracker.add("Episode / length", lengths.float().mean().item())
                if len(self.teams) > 1:
                    for name, means in team_means.items():
                        agent.tracker.add(f"Episode / team return / {name}", means.mean().item())
        self.notify("on_episode_end", returns, lengths)

    def _episodes_dropped(self, copies: torch.Tensor, lengths: torch.Tensor) -> None:
        """The episodes of env copies that failed: every algorithm drops their stored steps, and counts them."""
        for agent in self.agents:
            agent.drop_episodes(copies, lengths)
            if agent.tracker is not None:
                agent.tracker.add("Env / failed episodes", float(copies.sum()))

    def _track_step_times(self, clock: List[float]) -> None:
        """The step's time split (acting, env, storing, update with logging and checkpoints) and its rate."""
        acting, stepping, storing, updating = (b - a for a, b in zip(clock, clock[1:]))
        for agent in self.agents:
            tracker = agent.tracker
            if tracker is not None:
                tracker.add("Time / acting (ms per step)", 1000 * acting)
                tracker.add("Time / env (ms per step)", 1000 * stepping)
                tracker.add("Time / storing (ms per step)", 1000 * storing)
                tracker.add("Time / update, logging, checkpoints (ms per step)", 1000 * updating)
                tracker.add_ratio("Performance / env steps per second", self.env.num_envs, clock[-1] - clock[0])

    def _show_progress(self, bar: Progress, rate: float, recent: List[Deque[float]]) -> None:
        postfix = {"env_steps_per_s": f"{rate:.0f}"}
        for team, returns in zip(self.teams, recent):
            key = "mean_return" if len(self.teams) == 1 else f"return_{team}"
            postfix[key] = f"{sum(returns) / len(returns):.2f}"
        if getattr(self.env, "turn_based", False):  # a game's seats (in self-play their mean says nothing)
            for uid, returns in self._recent_seats.items():
                if returns:
                    postfix[f"return_{uid}"] = f"{sum(returns) / len(returns):.2f}"
        bar.set_postfix(postfix)

    def _evaluate_during_training(self) -> None:
        """Evaluate, each algorithm's checkpoint written first where ``checkpoint_at_eval`` asks for it (not at step
        0, nor where its own ``checkpoint_interval`` just wrote it).
        """
        if self.cfg["checkpoint_at_eval"]:
            for agent in self.agents:
                path = agent.checkpoint_path()
                if path is not None and agent.timestep > 0 and not os.path.isfile(path):
                    agent.write_checkpoint()
        result = self.eval()
        for agent, team in zip(self.agents, self.teams):
            figures = dict(result["teams"][team])
            if "sampled" in result and result["actions"] != "sampled":
                sampled = result["sampled"]["teams"][team]
                figures["sampled_mean_return"] = sampled["mean_return"]
                if sampled.get("zero_sum_self_play"):  # a greedy pass of draws only cannot show a zero-sum game
                    figures["zero_sum_self_play"] = True
            agent.record_evaluation(figures)

    def _evaluation_env(self) -> MultiAgentEnv:
        if self.eval_env is None:
            self.eval_env = self.env.make_evaluation_env(int(self.cfg["eval_num_envs"] or self.env.num_envs)) or self.env
        if self.eval_env is self.env:
            self._training_state = None  # no separate copies: the training episodes in progress end here
            self._evaluated_on_training_env = True
        return self.eval_env

    def eval(self, episodes: Optional[int] = None, *, video: Optional[bool] = None,
             opponents: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """Run ``episodes`` evaluation episodes (``cfg["eval_episodes"]`` by default) with greedy actions, sampled
        ones, or both (``cfg["eval_actions"]``); nothing is stored or learned.

        Each evaluation env copy runs a fixed share of the episodes, all started after the
        evaluation began, from the same seeds every time, so results are not biased toward short
        episodes and evaluations at different times are comparable. With ``"both"`` the greedy and
        the sampled episodes start from the same states. Under ``torchrun`` each rank runs
        ``episodes`` on its own copies and every rank gets the report of all of them.

        With ``video`` (default ``cfg["eval_video"]``), the first episode of evaluation copy 0 is
        recorded (the copies must render ``rgb_array`` frames) to
        ``videos/eval_<timestep>.<video_format>`` in each algorithm's experiment folder and to its
        TensorBoard / Weights & Biases.

        ``opponents`` (``{agent_id: policy}``, see :mod:`marlparts.trainers.opponents`) plays those seats
        with fixed policies for this evaluation, in place of the algorithm that controls them (and of the
        trainer's own opponents); the teams' figures then cover only the seats their algorithm played.

        Returns:
            A dict: ``"episodes"``, ``"timestep"``, ``"env_steps"`` (the training env steps so far, every copy
            and rank counted), ``"mean_length"``, ``"returns"`` (agent id to its mean return) and ``"teams"``
            (team name to its ``"mean_return"``, ``"std_return"``, ``"episode_returns"`` (one per episode),
            ``"returns"`` and ``"mean_length"``; a team is an algorithm, named by its class, and its return of
            an episode the mean or the sum of its agents' returns, ``cfg["team_return"]``). ``"mean_return"``
            and ``"std_return"`` at the top level are the single team's where one algorithm played, those of
            the mean return over every seat where fixed policies played every seat, and absent where several
            teams played (their returns are never averaged together). ``"actions"`` says whether these
            figures are of ``"greedy"`` or ``"sampled"`` actions (greedy where both ran); with
            ``cfg["eval_actions"] == "both"``, ``"greedy"`` and ``"sampled"`` hold the whole report of each
            (where fixed policies play every seat, the choice changes nothing and one pass runs).
            ``"videos"`` lists the video files written. For turn-based envs (``env.turn_based``),
            ``"outcomes"`` gives each seat's ``"win"``, ``"draw"`` and ``"loss"`` rates (episode return
            > 0, = 0, < 0), and ``"opponents"`` lists the seats fixed policies played. Where the env carries
            ``info_keys``, ``"env_info"`` gives, per key, each agent's mean over the episodes of the key's
            sum over the episode. The dict is also written to ``evaluation.json``, and its figures appended
            to ``evaluations.jsonl``, in the experiment folder of each algorithm that played a seat, each with
            that algorithm's own ``"timestep"`` and ``"env_steps"``, where the returned dict has the furthest
            algorithm's (a team that went on from a checkpoint beside a new one is ahead of it). An
            evaluation of fixed policies in every seat of an algorithm leaves its files as they were (its video
            too). An evaluation whose ``opponents`` put other policies in seats than those the algorithms train
            against measures something else: it adds no point to their learning curves (``evaluations.jsonl``),
            and its video is named ``eval_<timestep>_against_others``.
        """
        episodes = self.cfg["eval_episodes"] if episodes is None else episodes
        TRAINER_CONFIG_RANGES["eval_episodes"].check("eval(episodes=)", episodes)
        env = self._evaluation_env()
        video = bool(self.cfg["eval_video"] if video is None else video) and is_main_process()
        timestep, lags = self._steps_and_lags()  # each algorithm acts at its own step
        # separate copies are seeded from their own stream; the training env gets seeds drawn for evaluation
        seed = env.seed if env is not self.env else derived_seed(env.seed, EVALUATION_STREAM)
        passes = ["greedy", "sampled"] if self.cfg["eval_actions"] == "both" else [self.cfg["eval_actions"]]
        fixed = self._fixed_policies(opponents)
        if set(fixed) >= set(env.possible_agents):  # no algorithm plays: one pass
            passes = passes[:1]
        # an evaluation in which fixed policies played every seat of an algorithm is no report of it
        played = [any(uid not in fixed for uid in agent.possible_agents) for agent in self.agents]
        # other players in some seats than in training
        against_others = not play_alike_in_evaluation(fixed, self._fixed_policies(None), env.action_space)
        reports = {}
        for actions in passes:
            seats = self._evaluation_opponents(env, opponents, derived_seed(seed, OPPONENT_STREAM, EVALUATION_STREAM))
            reports[actions] = self._evaluation_pass(env, episodes, seed=seed, seats=seats, timestep=timestep,
                                                     lags=lags, sampled=actions == "sampled",
                                                     video=video and actions == passes[0], played=played,
                                                     against_others=against_others)
        report = dict(reports[passes[0]])
        report["actions"] = passes[0]
        if len(passes) > 1:
            report.update(reports)
        for agent, team, plays in zip(self.agents, self.teams, played):
            if plays and agent.experiment_dir is not None and os.path.isdir(agent.experiment_dir) \
                    and is_main_process():
                own = self._at_own_step(agent, report)  # the algorithm's own step (a team may be behind another)
                write_json_atomically(own, os.path.join(agent.experiment_dir, "evaluation.json"))
                if not against_others:  # other seats than those it trains against: not a point of its curve
                    append_json_line(learning_curve_point(own, team, reports),
                                     os.path.join(agent.experiment_dir, "evaluations.jsonl"))
        self.notify("on_evaluation", report)
        return report

    def _steps_and_lags(self) -> Tuple[int, List[int]]:
        """The furthest algorithm's step, and how far each algorithm's own step count is behind it: each counts
        its own steps, and a team that goes on from a checkpoint beside a new one is ahead of it.
        """
        furthest = max(agent.timestep for agent in self.agents)
        return furthest, [furthest - agent.timestep for agent in self.agents]

    def _at_own_step(self, agent: MultiAgent, report: Mapping[str, Any]) -> Dict[str, Any]:
        """``report`` with the step counts of ``agent``'s own steps (those of its passes too)."""
        own = dict(report, timestep=agent.timestep, env_steps=self._env_steps(agent.timestep))
        for actions in ("greedy", "sampled"):
            if isinstance(own.get(actions), Mapping):
                own[actions] = dict(own[actions], timestep=agent.timestep, env_steps=self._env_steps(agent.timestep))
        return own

    def _env_steps(self, timestep: int) -> int:
        """The training env steps of ``timestep`` vectorized steps, every copy and rank counted."""
        return timestep * self.env.num_envs * rank_and_world_size()[1]

    def _evaluation_pass(self, env: MultiAgentEnv, episodes: int, *, seed: Optional[int], seats: Optional[Opponents],
                         timestep: int, lags: List[int], sampled: bool, video: bool, played: Sequence[bool],
                         against_others: bool) -> Dict[str, Any]:
        """One pass of ``episodes`` evaluation episodes with greedy or ``sampled`` actions, and its report. A video
        goes to the algorithms that ``played`` a seat (named apart where the pass is ``against_others``: seats
        other than those the algorithms train against).

        The pass draws its random numbers from PyTorch generators of its own, seeded from ``seed``: an
        evaluation repeats itself (sampled actions included) and leaves the training's random stream as it was.
        """
        grad_enabled = torch.is_grad_enabled()
        for agent in self.agents:
            agent.set_mode("eval")
            agent.stochastic_evaluation = sampled
        # every CUDA device's generator is forked: torch.manual_seed below seeds them all
        cuda_devices = list(range(torch.cuda.device_count())) if torch.device(env.device).type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=cuda_devices):
                sampling_seed = derived_seed(seed, SAMPLING_STREAM, rank_and_world_size()[0])
                if sampling_seed is not None:
                    torch.manual_seed(sampling_seed)
                collected = collect_episodes(
                    env, lambda observations, states, infos: self._act(observations, states, infos, timestep, timestep,
                                                                       opponents=seats, lags=lags),
                    episodes, seed=seed, record_video=video)
        finally:
            torch.set_grad_enabled(grad_enabled)  # an interrupt inside a switch of grad mode may leave it off
            for agent in self.agents:
                agent.set_mode("train")
                agent.stochastic_evaluation = False
        fixed = seats.seats if seats is not None else []
        teams = {team: [uid for uid in agent.possible_agents if uid not in fixed]
                 for team, agent in zip(self.teams, self.agents)}
        # under torchrun every rank evaluates its own copies and every rank gets the same report of all episodes
        returns, lengths = all_gather_tensors(collected.returns), all_gather_tensors(collected.lengths)
        env_info = {key: all_gather_tensors(totals) for key, totals in collected.env_info.items()}
        report = summarise(returns, lengths, env.possible_agents, {team: uids for team, uids in teams.items() if uids},
                           timestep, outcomes=bool(getattr(env, "turn_based", False)), env_info=env_info,
                           team_return=self.cfg["team_return"])
        report["env_steps"] = self._env_steps(timestep)
        report["opponents"] = list(fixed)
        if collected.frames is not None:
            report["videos"] = self._write_videos(collected.frames, played, against_others)
        return report

    def _evaluation_opponents(self, env: MultiAgentEnv, opponents: Optional[Mapping[str, Any]],
                              seed: Optional[int]) -> Optional[Opponents]:
        """The fixed seats of one evaluation: the trainer's opponents with this evaluation's ``opponents`` in
        their seats, made anew (random players seeded from the evaluation's seed, algorithms as frozen
        copies), so the evaluation repeats itself and leaves the training opponents as they were.
        """
        merged = self._fixed_policies(opponents)
        return Opponents(merged, env, seed=seed, evaluation=True) if merged else None

    def _fixed_policies(self, opponents: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
        """Seat to fixed policy in an evaluation: the trainer's opponents, with this evaluation's ``opponents``
        in their seats.
        """
        merged = dict(self.opponents.policies) if self.opponents is not None else {}
        merged.update(opponents or {})
        return merged

    def _write_videos(self, frames: np.ndarray, played: Sequence[bool], against_others: bool) -> List[str]:
        """Save ``frames`` in the experiment folder of each algorithm that ``played`` a seat, named by its own step
        (``eval_<step>``, or ``eval_<step>_against_others`` for seats other than those it trains against, so that
        its own evaluation's video stays), and send them to its trackers.
        """
        fps, extension = float(self.cfg["video_fps"]), str(self.cfg["video_format"]).lower()
        name = "eval_{}_against_others" if against_others else "eval_{}"
        tag = "Evaluation / video against others" if against_others else "Evaluation / video"
        paths = []
        for agent, plays in zip(self.agents, played):
            if agent.experiment_dir is None or not plays:
                continue
            paths.append(save_video(frames, os.path.join(agent.experiment_dir, "videos",
                                                         f"{name.format(agent.timestep)}.{extension}"), fps=fps))
            if agent.tracker is not None:
                agent.tracker.write_video(tag, frames, fps, agent.timestep)
        return paths

    def _close_environments(self) -> None:
        self.env.close()
        if self.eval_env is not None and self.eval_env is not self.env:
            self.eval_env.close()
