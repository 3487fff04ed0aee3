"""Training progress on the terminal: a progress bar there, a plain line every few seconds elsewhere."""

import sys
import time
from typing import Any, Dict, Mapping, Optional, TextIO

import tqdm


class Progress:
    """How far ``train()`` has come, with the figures the trainer hands it (:meth:`set_postfix`).

    On a terminal it is a ``tqdm`` bar, redrawn in place. Where the output is not a terminal (a log
    file, a pipe, a batch job) a bar's redraws would pile up, so it writes one line every ``interval``
    seconds instead (and a last one at the end), e.g.
    ``step 1200/5000 (24%), 1530 env_steps_per_s, mean_return -20.31``.

    Args:
        total: steps of this ``train()`` call.
        disable: show nothing.
        interval: seconds between lines where the output is not a terminal.
        stream: where it writes (standard error by default).
    """

    def __init__(self, total: int, *, disable: bool = False, interval: float = 10.0,
                 stream: Optional[TextIO] = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.count, self.interval = int(total), 0, float(interval)
        self.disable = disable
        self.postfix: Dict[str, Any] = {}
        terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar = (tqdm.tqdm(total=total, unit="step", smoothing=0.1, file=self.stream)
                    if terminal and not disable else None)
        self.last_line = time.perf_counter()

    def update(self, steps: int = 1) -> None:
        """Count ``steps`` more steps."""
        self.count += steps
        if self.bar is not None:
            self.bar.update(steps)
        elif not self.disable and time.perf_counter() - self.last_line >= self.interval:
            self._write_line()

    def set_postfix(self, figures: Mapping[str, Any]) -> None:
        """The figures shown beside the count (env steps per second, mean returns)."""
        self.postfix = dict(figures)
        if self.bar is not None:
            self.bar.set_postfix(self.postfix)

    def close(self) -> None:
        """Close the bar, or write the last line."""
        if self.bar is not None:
            self.bar.close()
        elif not self.disable and self.count:
            self._write_line()

    def _write_line(self) -> None:
        figures = "".join(f", {value} {key}" if key == "env_steps_per_s" else f", {key} {value}"
                          for key, value in self.postfix.items())
        percent = 100 * self.count / self.total if self.total else 100
        self.stream.write(f"step {self.count}/{self.total} ({percent:.0f}%){figures}\n")
        self.stream.flush()
        self.last_line = time.perf_counter()
