"""The verdicts of a run as an HTML fragment for report.html (and any page that shows a run).

``verdicts_html(verdicts, summary)`` returns one ``<section class='verdicts'>`` with its own
small stylesheet: the SLO misses by term, then per verdict its kind, severity, title,
evidence and suggestions (with the re-simulated before/after where checked). Every string
from the run is escaped.
"""
from __future__ import annotations

import html

from ..metrics.verdicts import Verdict, check_text, slo_failure_lines

_COLOURS = {"high": "#b00020", "medium": "#b26a00", "info": "#1b7a1b"}
_STYLE = ("<style>.verdicts{margin:16px 0;max-width:1100px}.verdict{border-left:6px solid;padding:6px 12px;"
          "margin:10px 0;background:#fafafa}.verdict h3{margin:4px 0;font-size:1.05em}.verdict .kind{"
          "font-family:monospace}.verdict ul{margin:4px 0 4px 18px;padding:0}.verdict .try{margin:6px 0 0 0}"
          ".verdict code{background:#eee;padding:0 3px}.verdict .checked{color:#333}.verdict .note{color:#777}"
          "</style>")


def _suggestion(s) -> str:
    sets = " ".join(f"<code>--set {html.escape(o)}</code>" for o in s.overrides)
    out = f"<div class='try'><b>try:</b> {html.escape(s.action)} {sets}<br><i>{html.escape(s.why)}</i>"
    if s.check is not None:
        out += f"<br><span class='checked'>checked: {html.escape(check_text(s.check))}</span>"
    elif s.note:
        out += f"<br><span class='note'>{html.escape(s.note)}</span>"
    return out + "</div>"


def verdict_html(v: Verdict) -> str:
    colour = _COLOURS.get(v.severity, "#555")
    evidence = "".join(f"<li>{html.escape(e)}</li>" for e in v.evidence)
    return (f"<div class='verdict' style='border-color:{colour}'><h3><span class='kind'>{html.escape(v.kind)}</span> "
            f"<span style='color:{colour}'>({html.escape(v.severity)})</span>: {html.escape(v.title)}</h3>"
            f"<ul>{evidence}</ul>" + "".join(_suggestion(s) for s in v.suggestions) + "</div>")


def verdicts_html(verdicts: list[Verdict], summary: dict | None = None) -> str:
    """The ``<section>`` for a report: SLO misses by term (from ``summary``) and the verdicts."""
    misses = "".join(f"<p>{html.escape(line)}</p>" for line in slo_failure_lines(summary or {}))
    body = "".join(verdict_html(v) for v in verdicts) or "<p>no verdict (the run was not diagnosed)</p>"
    return f"{_STYLE}<section class='verdicts'><h2>What limits this run</h2>{misses}{body}</section>"
