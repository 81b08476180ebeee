"""One self-contained HTML page: plotly (its JavaScript inlined, nothing fetched at view time), an
interactive scatter of the options (cost against peak memory, one trace per method; hover shows
the configuration, a click shows its memory breakdown and its command), and stacked memory bars
per term against the GPU's usable line.

The page's data is one JSON object (see :func:`page_html`); ``searcher.report.search`` and
``searcher.report.serve`` build it from a search, an explanation or a serving plan.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from constraints.errors import FitplanError

METHOD_COLOURS = {
    "full": "#d62728",
    "lora": "#1f77b4",
    "qlora": "#2ca02c",
    "serve": "#9467bd",
    "does not fit": "#8c8c8c",
}
TERM_COLOURS = [
    "#4c72b0",
    "#dd8452",
    "#c44e52",
    "#55a868",
    "#8c8c8c",
    "#8172b3",
    "#937860",
    "#da8bc3",
]


def require_plotly() -> None:
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise FitplanError("--report needs plotly", "pip install 'fitplan[report]'") from None


def check_page_path(path: str, force: bool) -> None:
    """Before any work: the page's file may be written (and is not there, unless --force)."""
    require_plotly()
    p = Path(path)
    if p.is_dir():
        raise FitplanError(f"--report {p} is a directory", "give a file name such as page.html")
    if p.exists() and not force:
        raise FitplanError(f"--report {p} exists", "pass --force to overwrite it")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise FitplanError(f"--report: folder {parent} does not exist")


def page_html(data: dict[str, Any]) -> str:
    """The page for ``data``: title, subtitle, facts (label → text), members (each: label,
    method, x (GiB), y, hover, terms {name: bytes}, command, details {label: text}), x_title,
    y_title, y_log, usable_bytes, usable_label, capacity_bytes, notes."""
    from plotly.offline import get_plotlyjs

    facts = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in data.get("facts", {}).items()
    )
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in data.get("notes", []))
    payload = json.dumps(
        {**data, "colours": METHOD_COLOURS, "term_colours": TERM_COLOURS}, default=float
    ).replace("</", "<\\/")
    return TEMPLATE.format(
        title=html.escape(data["title"]),
        subtitle=html.escape(data.get("subtitle", "")),
        facts=facts,
        notes=f"<ul class='notes'>{notes}</ul>" if notes else "",
        plotly=get_plotlyjs(),
        payload=payload,
        script=SCRIPT,
    )


def write_page(data: dict[str, Any], path: str, *, force: bool = False) -> Path:
    from searcher.files import atomic_write_text

    return atomic_write_text(path, page_html(data), force=force)


TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 1.5rem auto;
       max-width: 1200px; color: #222; padding: 0 1rem; }}
h1 {{ font-size: 1.4rem; margin-bottom: .2rem; }}
.sub {{ color: #555; margin-top: 0; }}
table {{ border-collapse: collapse; font-size: .9rem; }}
th, td {{ text-align: left; padding: .15rem .6rem; border-bottom: 1px solid #eee; }}
.grid {{ display: grid; grid-template-columns: 1fr 1fr; gap: 1rem; }}
.chart {{ min-height: 420px; border: 1px solid #eee; }}
#selected {{ border: 1px solid #ddd; padding: .6rem 1rem; margin-top: 1rem; }}
pre {{ background: #f6f8fa; padding: .6rem; overflow-x: auto; white-space: pre-wrap; }}
.notes {{ color: #555; font-size: .9rem; }}
#members tr {{ cursor: pointer; }} #members tr.on {{ background: #fff6d5; }}
@media (max-width: 900px) {{ .grid {{ grid-template-columns: 1fr; }} }}
</style></head><body>
<h1>{title}</h1><p class="sub">{subtitle}</p>
<table class="facts">{facts}</table>
<div class="grid">
  <div id="scatter" class="chart"></div>
  <div id="bars" class="chart"></div>
</div>
<div id="selected"><h2 id="sel-title">Click a point to see its breakdown</h2>
  <div id="breakdown"></div>
  <h3>Command</h3><pre id="command">—</pre>
</div>
<h2>All options</h2><table id="members"></table>
{notes}
<script>{plotly}</script>
<script>const FITPLAN = {payload};</script>
<script>{script}</script>
</body></html>
"""

SCRIPT = r"""
(function () {
  const d = FITPLAN, GiB = 1073741824;
  const esc = s => String(s).replace(/[&<>"]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));
  const fmt = b => (b / GiB).toFixed(2) + ' GiB';
  const methods = [...new Set(d.members.map(m => m.method))];
  const traces = methods.map(meth => {
    const idx = d.members.map((m, i) => i).filter(i => d.members[i].method === meth);
    return {
      type: 'scatter', mode: 'markers', name: meth,
      x: idx.map(i => d.members[i].x), y: idx.map(i => d.members[i].y),
      customdata: idx, text: idx.map(i => d.members[i].hover),
      hovertemplate: '%{text}<extra></extra>',
      marker: {size: 11, color: d.colours[meth] || '#333', line: {width: 1, color: '#fff'}}
    };
  });
  const shapes = d.usable_bytes ? [{type: 'line', xref: 'x', yref: 'paper',
    x0: d.usable_bytes / GiB, x1: d.usable_bytes / GiB, y0: 0, y1: 1,
    line: {dash: 'dash', color: '#c00'}}] : [];
  Plotly.newPlot('scatter', traces, {
    title: {text: d.scatter_title || 'Options: cost against peak memory'},
    xaxis: {title: {text: d.x_title}}, yaxis: {title: {text: d.y_title}, type: d.y_log ? 'log' : 'linear'},
    shapes: shapes, margin: {t: 50}, legend: {orientation: 'h', y: -0.2}
  }, {displaylogo: false, responsive: true});

  const terms = [];
  d.members.forEach(m => Object.keys(m.terms).forEach(t => { if (!terms.includes(t)) terms.push(t); }));
  const labels = d.members.map((m, i) => '#' + (i + 1));
  const barTraces = terms.map((t, k) => ({
    type: 'bar', name: t, x: labels, y: d.members.map(m => (m.terms[t] || 0) / GiB),
    marker: {color: d.term_colours[k % d.term_colours.length]},
    hovertemplate: t + ': %{y:.2f} GiB<extra>%{x}</extra>'
  }));
  const barShapes = [];
  if (d.usable_bytes) barShapes.push({type: 'line', xref: 'paper', x0: 0, x1: 1,
    y0: d.usable_bytes / GiB, y1: d.usable_bytes / GiB, line: {dash: 'dash', color: '#c00'}});
  Plotly.newPlot('bars', barTraces, {
    barmode: 'stack', title: {text: 'Memory per GPU by term'},
    yaxis: {title: {text: 'GiB per GPU'}}, xaxis: {title: {text: 'option'}, type: 'category'},
    shapes: barShapes, margin: {t: 50}, legend: {orientation: 'h', y: -0.2},
    annotations: d.usable_bytes ? [{xref: 'paper', x: 1, y: d.usable_bytes / GiB, yanchor: 'bottom',
      xanchor: 'right', showarrow: false, text: d.usable_label || 'usable', font: {color: '#c00'}}] : []
  }, {displaylogo: false, responsive: true});

  const table = document.getElementById('members');
  table.innerHTML = '<tr><th>#</th><th>method</th><th>option</th><th>' + esc(d.x_title) +
    '</th><th>' + esc(d.y_title) + '</th></tr>' + d.members.map((m, i) =>
    '<tr data-i="' + i + '"><td>' + (i + 1) + '</td><td>' + esc(m.method) + '</td><td>' +
    esc(m.label) + '</td><td>' + m.x.toFixed(2) + '</td><td>' + esc(m.y_text || m.y) + '</td></tr>').join('');
  table.querySelectorAll('tr[data-i]').forEach(r => r.addEventListener('click', () => select(+r.dataset.i)));

  function select(i) {
    const m = d.members[i];
    document.getElementById('sel-title').textContent = '#' + (i + 1) + ' ' + m.label;
    const total = Object.values(m.terms).reduce((a, b) => a + b, 0);
    let rows = Object.entries(m.terms).map(([t, b]) =>
      '<tr><th>' + esc(t) + '</th><td>' + fmt(b) + '</td></tr>').join('');
    rows += '<tr><th>total</th><td><b>' + fmt(total) + '</b></td></tr>';
    if (d.usable_bytes) rows += '<tr><th>' + esc(d.usable_label || 'usable') + '</th><td>' + fmt(d.usable_bytes) + '</td></tr>';
    Object.entries(m.details || {}).forEach(([k, v]) => { rows += '<tr><th>' + esc(k) + '</th><td>' + esc(v) + '</td></tr>'; });
    document.getElementById('breakdown').innerHTML = '<table class="breakdown" data-member="' + i + '">' + rows + '</table>';
    document.getElementById('command').textContent = m.command || '—';
    table.querySelectorAll('tr[data-i]').forEach(r => r.classList.toggle('on', +r.dataset.i === i));
    Plotly.restyle('scatter', {'marker.size': traces.map(t => t.customdata.map(j => j === i ? 18 : 11)),
      'marker.line.width': traces.map(t => t.customdata.map(j => j === i ? 3 : 1)),
      'marker.line.color': traces.map(t => t.customdata.map(j => j === i ? '#000' : '#fff'))});
    const colours = d.members.map((_, j) => j === i ? 'rgba(255,190,0,0.35)' : 'rgba(0,0,0,0)');
    Plotly.relayout('bars', {shapes: barShapes.concat([{type: 'rect', xref: 'x', yref: 'paper',
      x0: i - 0.5, x1: i + 0.5, y0: 0, y1: 1, fillcolor: colours[i], line: {width: 0}, layer: 'below'}])});
  }
  document.getElementById('scatter').on('plotly_click', ev => select(ev.points[0].customdata));
  document.getElementById('bars').on('plotly_click', ev => select(ev.points[0].pointIndex));
  window.fitplanSelect = select;
  if (d.members.length) select(d.selected || 0);
})();
"""
