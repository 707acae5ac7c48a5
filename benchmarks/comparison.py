"""A measure that compares adapters side by side against baselines of its
own (9. telemetry on vs off, 12. event ids on vs off): its tables, its JSON
and its notes, said once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .report import Column, Results, _cell_text, _ratio, _table

#: The sizes a comparison's JSON reports.
_SIZES = ("cost_text", "cost_rounds", "cost_batch", "firehose", "reps")


@attrs.frozen
class Comparison:
    """Targets, their columns, and which baseline each compared target has."""

    number: str
    labels: Mapping[str, str]
    columns: tuple[Column, ...]
    #: compared target → its baseline
    pairs: Mapping[str, str]
    #: how a baseline is named in a ratio ("x / y"), where not by its label
    baseline_names: Mapping[str, str] = attrs.field(factory=dict)

    def _baseline(self, target: str) -> str:
        return self.baseline_names.get(target, self.labels[target])

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(self.labels)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(column.key for column in self.columns)

    def ratios(self, results: Results) -> dict[str, dict[str, float | None]]:
        """Each compared target's medians over those of its baseline."""
        return {
            on: {key: _ratio(results.median(on, key), results.median(off, key)) for key in self.keys}
            for on, off in self.pairs.items()
        }

    def render(self, results: Results, fills: Mapping[str, Any]) -> str:
        """The table of medians and the table of ratios."""
        names = {c.key: f"{c.label.format(**fills)} ({c.unit})" for c in self.columns}
        header = ["measure (median [min-max])", *(self.labels[t] for t in self.targets)]
        rows = [[names[c.key], *(_cell_text(results.cell(t, c.key), c.digits) for t in self.targets)]
                for c in self.columns]
        ratios = self.ratios(results)
        ratio_rows = [
            [names[key], *("n/a" if ratios[on][key] is None else f"{ratios[on][key]:.2f}x" for on in self.pairs)]
            for key in self.keys
        ]
        pairs = self.pairs.items()
        ratio_header = ["ratio of medians", *(f"{self.labels[on]} / {self._baseline(off)}" for on, off in pairs)]
        return "\n\n".join([_table(header, rows), _table(ratio_header, ratio_rows, max_width=60)])

    def json(self, results: Results, sizes: Mapping[str, Any]) -> dict[str, Any]:
        """The measure in the JSON file."""
        return {
            "targets": dict(self.labels),
            "baselines": dict(self.pairs),
            "columns": [{"key": c.key, "label": c.label, "unit": c.unit, "better": c.better} for c in self.columns],
            "results": {t: {key: results.cell(t, key) for key in self.keys} for t in self.targets},
            "ratios_to_baseline": self.ratios(results),
            "paired_ratios_to_baseline": {
                on: {key: results.paired_ratios(on, off, key) for key in self.keys} for on, off in self.pairs.items()
            },
            "details": results.details,
            "sizes": {name: sizes.get(name) for name in _SIZES},
        }

    def notes(self, results: Results, what: str) -> list[str]:
        """The ratios in words, and the errors each target met."""
        lines = []
        for on, ratios in self.ratios(results).items():
            shown = [f"{key} {ratio:.2f}x" for key, ratio in ratios.items() if ratio is not None]
            if shown:
                lines.append(f"{what}, {self.labels[on]} / {self._baseline(self.pairs[on])}: " + ", ".join(shown))
        for target, details in results.details.items():
            if details.get("errors"):
                lines.append(f"errors seen in {self.number} for {self.labels.get(target, target)}: "
                             f"{details['errors'][:3]}")
        return lines
