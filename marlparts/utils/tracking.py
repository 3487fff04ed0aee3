"""Metrics to TensorBoard, a CSV file and, when asked, Weights & Biases, through one ``add``/``write`` path.

Each destination is a sink. A sink that fails (a full disk, a lost connection) is reported once
with a warning naming it and the error, and left out from then on: logging never stops or
corrupts training, and checkpoints are written apart from it.
"""

import collections
import csv
import errno
import io
import os
import warnings
from typing import Any, Dict, List, Optional

import numpy as np

from marlparts.utils.files import describe_write_error, write_all


class TensorBoardSink:
    """Scalars and videos (animated GIF images) to TensorBoard event files in ``directory``."""

    name = "TensorBoard"

    def __init__(self, directory: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.directory = directory
        self.writer = SummaryWriter(log_dir=directory)

    def _check_folder(self) -> None:
        if not os.path.isdir(self.directory):
            raise FileNotFoundError(errno.ENOENT, f"{self.directory} was deleted while the run was writing its "
                                                  "TensorBoard event file")

    def scalars(self, values: Dict[str, float], step: int) -> None:
        """Write ``values`` at ``step``."""
        self._check_folder()
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def video(self, tag: str, frames: np.ndarray, fps: float, step: int) -> None:
        """Write ``frames`` ``(time, height, width, 3)`` uint8 as an animated image."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        from marlparts.utils.video import encode_gif

        self._check_folder()
        image = Summary.Image(height=frames.shape[1], width=frames.shape[2], colorspace=3,
                              encoded_image_string=encode_gif(frames, fps))
        self.writer.file_writer.add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)
        self.writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self.writer.close()


class CsvSink:
    """Every scalar as a ``step,tag,value`` row of ``scalars.csv`` in ``directory``, readable with
    ``pandas.read_csv`` alone (``.pivot(index="step", columns="tag", values="value")`` gives one
    column per tag).

    The rows of a write go to the file in one write, unbuffered. A write that fails (a full disk) is
    cut back so that the file ends with a whole row, and raises ``OSError`` naming the file; a file
    deleted or replaced since it was opened (its folder removed) raises ``FileNotFoundError`` naming it.
    """

    name = "CSV"

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, "scalars.csv")
        self.fd: Optional[int] = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        status = os.fstat(self.fd)
        self._identity = (status.st_dev, status.st_ino)
        self._drop_partial_row()
        if os.fstat(self.fd).st_size == 0:
            self._append([["step", "tag", "value"]])

    def _drop_partial_row(self) -> None:
        """Cut off a last row that a process killed while writing left unfinished."""
        size = os.fstat(self.fd).st_size
        end, chunk = size, 1 << 16
        with open(self.path, "rb") as file:
            while end > 0:  # back from the end to the last line break
                file.seek(max(0, end - chunk))
                data = file.read(end - max(0, end - chunk))
                if data.rfind(b"\n") >= 0:
                    end = max(0, end - chunk) + data.rfind(b"\n") + 1
                    break
                end = max(0, end - chunk)
        if end < size:
            os.ftruncate(self.fd, end)
            warnings.warn(f"{self.path} ended in an unfinished row, which is cut off", RuntimeWarning, stacklevel=4)

    def _append(self, rows: List[List[Any]]) -> None:
        text = io.StringIO()
        csv.writer(text).writerows(rows)
        try:
            self._check_file()
            size = os.fstat(self.fd).st_size
            try:
                write_all(self.fd, text.getvalue().encode())
            except OSError as error:
                try:
                    os.ftruncate(self.fd, size)  # whole rows only: a part of one would spoil the file
                except OSError:
                    pass
                raise OSError(error.errno, f"could not write to {self.path}: {describe_write_error(error, self.path)}") \
                    from error
        except OSError:
            self.close()  # a file that failed once is written no more
            raise

    def _check_file(self) -> None:
        """Raise ``FileNotFoundError`` naming the file if it was deleted or replaced since it was opened."""
        try:
            status = os.stat(self.path)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, f"{self.path} was deleted while the run was writing it (was the "
                                                  "experiment folder removed?)") from None
        if (status.st_dev, status.st_ino) != self._identity:
            raise FileNotFoundError(errno.ENOENT, f"{self.path} was replaced by another file while the run was "
                                                  "writing it")

    def scalars(self, values: Dict[str, float], step: int) -> None:
        """Append one row per value, all in one write."""
        self._append([[step, tag, repr(float(value))] for tag, value in values.items()])

    def video(self, tag: str, frames: np.ndarray, fps: float, step: int) -> None:
        """Videos are files of their own; nothing goes to the CSV."""

    def close(self) -> None:
        """Close the file (once)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class WandbSink:
    """Scalars and videos to a Weights & Biases run (``WANDB_MODE=offline`` works with no network)."""

    name = "Weights & Biases"

    def __init__(self, directory: Optional[str], config: Dict[str, Any], wandb_kwargs: Dict[str, Any]) -> None:
        try:
            import wandb
        except ImportError as error:
            raise ImportError("cfg['experiment']['wandb'] is True but wandb is not installed: "
                              "pip install 'marlparts[wandb]'") from error
        self.wandb = wandb
        kwargs = {"dir": directory, "config": plain_config(config), "sync_tensorboard": False}
        kwargs.update(wandb_kwargs or {})
        self.run = wandb.init(**kwargs)

    def scalars(self, values: Dict[str, float], step: int) -> None:
        """Log ``values`` at ``step``."""
        if values:
            self.run.log(dict(values), step=step)

    def video(self, tag: str, frames: np.ndarray, fps: float, step: int) -> None:
        """Log ``frames`` ``(time, height, width, 3)`` as a video."""
        self.run.log({tag: self.wandb.Video(np.transpose(frames, (0, 3, 1, 2)), fps=int(fps))}, step=step)

    def close(self) -> None:
        """Finish the run."""
        self.run.finish()


class Tracker:
    """Accumulates scalar metrics and writes their means to every sink at each :meth:`write`.

    Args:
        directory: the experiment folder (TensorBoard event files and ``scalars.csv`` go there).
        tensorboard: write TensorBoard event files.
        csv: write ``scalars.csv``.
        wandb: also log to Weights & Biases (``wandb`` must be installed; offline mode works).
        wandb_kwargs: passed to ``wandb.init`` (``project``, ``mode="offline"``, ...).
        config: the run's configuration, recorded by Weights & Biases.
    """

    def __init__(self, directory: str, *, tensorboard: bool = True, csv: bool = True, wandb: bool = False,
                 wandb_kwargs: Optional[Dict[str, Any]] = None, config: Optional[Dict[str, Any]] = None) -> None:
        self._values: Dict[str, List[float]] = collections.defaultdict(list)
        self._ratios: Dict[str, List[float]] = collections.defaultdict(lambda: [0.0, 0.0])
        self._last_step: Optional[int] = None
        self.directory = directory
        self.sinks: List[Any] = []
        if tensorboard:
            self.sinks.append(TensorBoardSink(directory))
        if csv:
            self.sinks.append(CsvSink(directory))
        if wandb:
            self.sinks.append(WandbSink(directory, config or {}, wandb_kwargs or {}))

    @property
    def wandb_run(self) -> Any:
        """The Weights & Biases run, or None."""
        return next((sink.run for sink in self.sinks if isinstance(sink, WandbSink)), None)

    def add(self, tag: str, value: float) -> None:
        """Record one value of metric ``tag``."""
        self._values[tag].append(float(value))

    def add_ratio(self, tag: str, numerator: float, denominator: float) -> None:
        """Record a rate such as env steps per second: written as the sum of the numerators over the
        sum of the denominators since the last :meth:`write` (not a mean of per-step rates).
        """
        sums = self._ratios[tag]
        sums[0] += float(numerator)
        sums[1] += float(denominator)

    def means(self) -> Dict[str, float]:
        """Mean of each metric (and each ratio) recorded since the last :meth:`write`."""
        means = {tag: float(np.mean(values)) for tag, values in self._values.items() if values}
        means.update({tag: sums[0] / sums[1] for tag, sums in self._ratios.items() if sums[1] > 0})
        return means

    def write(self, step: int) -> Dict[str, float]:
        """Write the means at ``step`` to every sink, clear them, and return them.

        A step is written once: values recorded after ``step`` was written wait for the next write.
        """
        if step == self._last_step:
            return {}
        self._last_step = step
        means = self.means()
        if means:
            self._to_sinks("scalars", means, step)
        self._values.clear()
        self._ratios.clear()
        return means

    def write_now(self, values: Dict[str, float], step: int) -> None:
        """Write ``values`` at ``step`` at once, apart from the accumulated means (e.g. an evaluation)."""
        self._to_sinks("scalars", dict(values), step)

    def write_video(self, tag: str, frames: np.ndarray, fps: float, step: int) -> None:
        """Write a video, ``frames`` ``(time, height, width, 3)`` uint8, to the sinks that take videos."""
        self._to_sinks("video", tag, frames, fps, step)

    def _to_sinks(self, method: str, *args: Any) -> None:
        for sink in list(self.sinks):
            try:
                getattr(sink, method)(*args)
            except Exception as error:  # a logger must never stop training
                warnings.warn(f"{sink.name} logging failed and is switched off for this run: {error!r}",
                              RuntimeWarning, stacklevel=3)
                self.sinks.remove(sink)

    def close(self) -> None:
        """Flush and close every sink."""
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as error:
                warnings.warn(f"{sink.name} failed to close: {error!r}", RuntimeWarning, stacklevel=2)
        self.sinks = []


def plain_config(value: Any) -> Any:
    """A copy of a config with classes and other objects replaced by their names (for JSON-like records)."""
    if isinstance(value, dict):
        return {str(k): plain_config(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_config(v) for v in value]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return getattr(value, "__name__", repr(value))

