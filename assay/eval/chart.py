"""An eval chart as one self-contained HTML file with an inline SVG bar chart.

Why HTML/SVG and not PNG: it needs no plotting library (matplotlib would be
the heaviest dependency of the project, for one picture), it opens in any
browser and CI artifact viewer, it stays readable as text in a review, and
the numbers are in the file (as a table and as tooltips), not only drawn.
"""

from __future__ import annotations

from html import escape

from schemas.eval import ARM_TITLES, EvalReport

METRICS: list[tuple[str, str]] = [
    ("accuracy", "accuracy"),
    ("false_true_rate", "false-true rate"),
    ("false_false_rate", "false-false rate"),
    ("cannot_determine_rate", "cannot_determine rate"),
]
_COLOURS = ["#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#718096"]
_BAR, _GAP, _GROUP_GAP, _HEIGHT, _LEFT, _TOP = 26, 4, 34, 260, 48, 20


def _series(reports: list[tuple[str, EvalReport]]) -> list[tuple[str, list[float | None]]]:
    series = []
    for label, report in reports:
        for arm in report.arms:
            name = ARM_TITLES.get(arm.arm, arm.arm)
            title = f"{label}{report.model} - {name}" if label else f"{report.model} - {name}"
            series.append((title, [getattr(arm.metrics, metric) for metric, _ in METRICS]))
    return series


def render_chart(reports: list[tuple[str, EvalReport]]) -> str:
    """The HTML page for one report (label "") or several (labels "A: ", "B: ")."""
    series = _series(reports)
    group_width = len(series) * (_BAR + _GAP) + _GROUP_GAP
    width = _LEFT + len(METRICS) * group_width + 20
    height = _TOP + _HEIGHT + 60
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="assay eval chart" font-family="sans-serif" font-size="12">'
    ]
    for tick in range(0, 101, 25):
        y = _TOP + _HEIGHT - tick * _HEIGHT / 100
        parts.append(
            f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{width - 10}" y2="{y:.1f}" stroke="#e2e8f0"/>'
            f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{tick}%</text>'
        )
    for group, (_, metric_title) in enumerate(METRICS):
        x0 = _LEFT + group * group_width + _GROUP_GAP / 2
        for index, (title, values) in enumerate(series):
            value = values[group]
            x = x0 + index * (_BAR + _GAP)
            colour = _COLOURS[index % len(_COLOURS)]
            if value is None:
                parts.append(
                    f'<text x="{x + _BAR / 2:.1f}" y="{_TOP + _HEIGHT - 4}" '
                    f'text-anchor="middle" fill="#a0aec0">n/a</text>'
                )
                continue
            bar = value * _HEIGHT
            tip = escape(f"{title}: {metric_title} {value:.1%}")
            parts.append(
                f'<rect x="{x:.1f}" y="{_TOP + _HEIGHT - bar:.1f}" width="{_BAR}" '
                f'height="{bar:.1f}" fill="{colour}"><title>{tip}</title></rect>'
            )
        centre = x0 + len(series) * (_BAR + _GAP) / 2
        parts.append(
            f'<text x="{centre:.1f}" y="{_TOP + _HEIGHT + 20}" text-anchor="middle">'
            f"{escape(metric_title)}</text>"
        )
    parts.append("</svg>")
    legend = "".join(
        f'<li><span style="background:{_COLOURS[i % len(_COLOURS)]}"></span>{escape(title)}</li>'
        for i, (title, _) in enumerate(series)
    )
    rows = "".join(
        "<tr><td>"
        + escape(title)
        + "</td>"
        + "".join(f"<td>{'n/a' if v is None else f'{v:.1%}'}</td>" for v in values)
        + "</tr>"
        for title, values in series
    )
    header = "".join(f"<th>{escape(title)}</th>" for _, title in METRICS)
    subtitle = "; ".join(
        escape(
            f"{label}suite {r.suite.name} ({r.suite.cases} cases), profile {r.profile}, "
            f"repeat {r.repeat}{'' if r.complete else ', PARTIAL'}"
            f"{', SCRIPTED model (not an LLM)' if r.scripted else ''}"
        )
        for label, r in reports
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>assay eval</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #1a202c; }}
ul.legend {{ list-style: none; padding: 0; }}
ul.legend span {{ display: inline-block; width: 12px; height: 12px; margin-right: 6px; }}
table {{ border-collapse: collapse; margin-top: 1em; }}
td, th {{ border: 1px solid #cbd5e0; padding: 4px 8px; text-align: right; }}
td:first-child {{ text-align: left; }}
</style></head><body>
<h1>assay eval</h1>
<p>{subtitle}</p>
<p>The false-true rate is the headline: of the cases whose label is not <code>true</code>,
the share answered <code>true</code>. Lower is better; accuracy higher is better.</p>
{"".join(parts)}
<ul class="legend">{legend}</ul>
<table><tr><th>series</th>{header}</tr>{rows}</table>
</body></html>
"""
