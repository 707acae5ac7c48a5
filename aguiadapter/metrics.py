"""Process metrics in the Prometheus text format (``GET /metrics``).

Plain counters kept by the service; rendering them is the only work, done
when someone scrapes. Nothing here names a thread, a user or a secret.
"""

from __future__ import annotations

import bisect
from collections import Counter

#: Upper bounds (seconds) of the A2A latency histogram.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """Counters and gauges of one adapter app."""

    def __init__(self) -> None:
        self.runs_started = 0
        self.runs_ended: Counter[str] = Counter()
        self.events_relayed = 0
        self.errors: Counter[str] = Counter()
        self._latency_counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self._latency_sum = 0.0

    def observe_a2a_latency(self, seconds: float) -> None:
        """Time from sending a message to the runtime's first event."""
        self._latency_counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self._latency_sum += seconds

    def render(self, *, active_runs: int, pending_threads: int) -> str:
        """The exposition text."""
        lines = [
            "# HELP aguiadapter_active_runs Runs streaming right now.",
            "# TYPE aguiadapter_active_runs gauge",
            f"aguiadapter_active_runs {active_runs}",
            "# HELP aguiadapter_pending_interrupt_threads Threads waiting for interrupt answers.",
            "# TYPE aguiadapter_pending_interrupt_threads gauge",
            f"aguiadapter_pending_interrupt_threads {pending_threads}",
            "# HELP aguiadapter_runs_started_total Runs admitted and started.",
            "# TYPE aguiadapter_runs_started_total counter",
            f"aguiadapter_runs_started_total {self.runs_started}",
            "# HELP aguiadapter_runs_ended_total Runs ended, by outcome.",
            "# TYPE aguiadapter_runs_ended_total counter",
            *(f'aguiadapter_runs_ended_total{{outcome="{k}"}} {v}' for k, v in sorted(self.runs_ended.items())),
            "# HELP aguiadapter_events_relayed_total AG-UI events written to clients.",
            "# TYPE aguiadapter_events_relayed_total counter",
            f"aguiadapter_events_relayed_total {self.events_relayed}",
            "# HELP aguiadapter_errors_total Errors answered, by code (HTTP and RUN_ERROR).",
            "# TYPE aguiadapter_errors_total counter",
            *(f'aguiadapter_errors_total{{code="{k}"}} {v}' for k, v in sorted(self.errors.items())),
            "# HELP aguiadapter_a2a_first_event_seconds Time to the runtime's first event.",
            "# TYPE aguiadapter_a2a_first_event_seconds histogram",
        ]
        cumulative = 0
        for bound, count in zip(LATENCY_BUCKETS, self._latency_counts, strict=False):
            cumulative += count
            lines.append(f'aguiadapter_a2a_first_event_seconds_bucket{{le="{bound}"}} {cumulative}')
        total = sum(self._latency_counts)
        lines.append(f'aguiadapter_a2a_first_event_seconds_bucket{{le="+Inf"}} {total}')
        lines.append(f"aguiadapter_a2a_first_event_seconds_sum {self._latency_sum:.6f}")
        lines.append(f"aguiadapter_a2a_first_event_seconds_count {total}")
        return "\n".join(lines) + "\n"
