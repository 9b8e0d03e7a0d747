"""How long the daemon's ticks take and how early its leases are renewed, kept cheaply.

Tick durations go into a histogram of geometric buckets (5 % apart), so a daemon that runs
for months keeps a few hundred counters, not a list; percentiles are read off it as the
upper bound of their bucket. Renewal lateness is the time of a renewal minus the deadline it
had to meet (the lease's expiry as last renewed): negative is early, which is what it must
always be. `LeaseKeeper` writes a snapshot to <data_dir>/run/stats.json (bench/scale.py).
"""

from __future__ import annotations

import bisect
import json
import math
import os
import threading
from pathlib import Path

SMALLEST = 0.0001  # seconds: the first bucket's upper bound
GROWTH = 1.05
BOUNDS = [SMALLEST * GROWTH ** k for k in range(int(math.log(3600 / SMALLEST, GROWTH)) + 2)]
# The histogram /metrics shows (seconds): few buckets, so each runner's row stays small.
EXPORTED_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class TickStats:
    """Counters shared by the loop (ticks) and the lease keeper (renewals); thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts = [0] * (len(BOUNDS) + 1)
        self.ticks = 0
        self.tick_max = 0.0
        self.tick_sum = 0.0
        self.renewals = 0
        self.renewal_max_late: float | None = None
        self.renewals_skipped = 0

    def tick(self, seconds: float) -> None:
        with self._lock:
            self._counts[bisect.bisect_left(BOUNDS, seconds)] += 1
            self.ticks += 1
            self.tick_max = max(self.tick_max, seconds)
            self.tick_sum += seconds

    def renewed(self, late: float) -> None:
        with self._lock:
            self.renewals += 1
            if self.renewal_max_late is None or late > self.renewal_max_late:
                self.renewal_max_late = late

    def skipped(self, count: int) -> None:
        with self._lock:
            self.renewals_skipped += count

    def tick_percentile(self, share: float) -> float:
        """The upper bound of the bucket holding the `share` quantile, in seconds (0 before a tick)."""
        with self._lock:
            wanted = math.ceil(share * self.ticks)
            seen = 0
            for index, count in enumerate(self._counts):
                seen += count
                if count and seen >= wanted:
                    return min(BOUNDS[index] if index < len(BOUNDS) else self.tick_max, self.tick_max)
        return 0.0

    def snapshot(self) -> dict:
        late = self.renewal_max_late
        return {
            "ticks": self.ticks,
            "tick_p50_ms": round(self.tick_percentile(0.50) * 1000, 1),
            "tick_p99_ms": round(self.tick_percentile(0.99) * 1000, 1),
            "tick_max_ms": round(self.tick_max * 1000, 1),
            "renewals": self.renewals,
            "renewals_skipped": self.renewals_skipped,
            "lease_renewal_max_late_s": None if late is None else round(late, 3),
        }

    def exported(self) -> dict:
        """Ticks so far as a Prometheus histogram: cumulative counts at EXPORTED_BOUNDS, the
        count and the sum. A fine bucket counts under the first bound at or above its own
        upper bound, so a tick may be shown up to one fine bucket (5 %) slower than it was."""
        with self._lock:
            counts, seen, fine = [], 0, 0
            for bound in EXPORTED_BOUNDS:
                while fine < len(BOUNDS) and BOUNDS[fine] <= bound:
                    seen += self._counts[fine]
                    fine += 1
                counts.append(seen)
            return {"bounds": list(EXPORTED_BOUNDS), "counts": counts, "count": self.ticks,
                    "sum": round(self.tick_sum, 6)}

    def write(self, path: Path) -> None:
        """The snapshot as JSON, replaced whole (a reader never sees half of it)."""
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.snapshot()))
        os.replace(tmp, path)
