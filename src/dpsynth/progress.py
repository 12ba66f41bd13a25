"""Progress that a person at a terminal and a log file both read.

On a terminal: a tqdm bar. Anywhere else (a Snakemake/DVC/SLURM job's log): one plain line when
the work starts, one every ``DPSYNTH_PROGRESS_EVERY`` seconds (default 5), and one at the end,
each flushed at once -- a bar's carriage returns make an unreadable log, and a silent log for
minutes looks like a hung job. A line reads::

    [train dps_mnist] step 240/900 (26.7%) | 3.81 step/s | ETA 2m53s | eps 8.45/10
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, TextIO

ENV_EVERY = "DPSYNTH_PROGRESS_EVERY"


def _interval() -> float:
    raw = os.environ.get(ENV_EVERY, "5")
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{ENV_EVERY}={raw!r}: must be a number of seconds >= 0")
    return value


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class Progress:
    """Counts work done; shows it as a bar (``bar=True``) or as timed lines (``bar=False``).

    ``bar=None`` picks the bar only when ``stream`` is a terminal. ``fields`` (``set(...)``) are
    shown after the rate, e.g. the privacy budget spent against its target and the last loss.
    """

    def __init__(self, total: int | None, desc: str, *, unit: str = "step", initial: int = 0,
                 bar: bool | None = None, stream: TextIO | None = None, every: float | None = None) -> None:
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.stream = stream if stream is not None else sys.stderr
        self.every = _interval() if every is None else every
        self.fields: dict[str, Any] = {}
        self._start_n, self._t0 = initial, time.monotonic()
        self._last = self._t0
        # The rate is measured from the first unit done, not from construction: set-up before it
        # (loading data, building a network) would otherwise read as a slow rate and a wild ETA.
        self._first: tuple[int, float] | None = None
        self._closed = False
        use_bar = bar if bar is not None else bool(getattr(self.stream, "isatty", lambda: False)())
        self._bar = None
        if use_bar:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, file=self.stream,
                             dynamic_ncols=True)
        else:
            self._line("started")

    def set(self, **fields: Any) -> None:
        self.fields.update(fields)
        if self._bar is not None:
            self._bar.set_postfix({k: _fmt(v) for k, v in fields.items()}, refresh=False)

    def update(self, n: int = 1) -> None:
        if self._first is None:
            self._first = (self.n + n, time.monotonic())
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self._line()

    def rate(self) -> float:
        """Units per second since the first unit was done, once a later one is; until then the
        average since the start (what the final line reports)."""
        known = self.known_rate()
        return known if known is not None else (self.n - self._start_n) / max(time.monotonic() - self._t0, 1e-9)

    def known_rate(self) -> float | None:
        """Units per second between the first unit done and now; None until a unit after the first
        has been done (an ETA from less would be a guess)."""
        if self._first is None or self.n <= self._first[0]:
            return None
        return (self.n - self._first[0]) / max(time.monotonic() - self._first[1], 1e-9)

    def line(self, status: str | None = None) -> str:
        """The text of a progress line now (also what a test reads)."""
        parts = [f"[{self.desc}] {self.unit} {self.n}" + (f"/{self.total}" if self.total else "")]
        if self.total:
            parts[0] += f" ({100.0 * self.n / self.total:.1f}%)"
        rate = self.rate()
        parts.append(f"{rate:.3g} {self.unit}/s")
        known = self.known_rate()
        if self.total and status is None and known:  # no ETA until the rate is measured
            parts.append(f"ETA {format_duration((self.total - self.n) / known)}")
        parts += [f"{k} {_fmt(v)}" for k, v in self.fields.items()]
        if status:
            parts.append(status)
        return " | ".join(parts)

    def _line(self, status: str | None = None) -> None:
        print(self.line(status), file=self.stream, flush=True)

    def close(self, status: str | None = None) -> None:
        """The last line: ``done`` when the count reached its total, else ``stopped``."""
        if status is None:
            status = "done" if not self.total or self.n >= self.total else "stopped"
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        else:
            self._line(f"{status} in {format_duration(time.monotonic() - self._t0)}")

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: Any) -> None:
        self.close(None if exc_type is None else f"stopped ({exc_type.__name__})")
