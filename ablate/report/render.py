"""A report as a small document tree, rendered to Markdown and to one self-contained HTML page.

Both renderings come from the same blocks, so the two files always say the same thing. The HTML page
embeds its figures as ``data:image/png;base64`` URIs and its CSS inline: it opens offline, from an
e-mail attachment or a phone. Given `Links`, the HTML page also links each variant's and rung's name
(a table's first column or header, a bullet's leading name) and a table's variant-at-rung cell to their
runs in the MLflow UI (`ablate ui` serves it as the study's landing page: ablate/tracking/landing.py).
Table text wraps only at spaces (never inside a variant name), headers wrap to keep columns narrow, and a
table still too wide scrolls sideways instead of squeezing.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

from ablate.tracking.landing import link_base_meta

STAMP_PREFIX = "Report generated on "  # the one line allowed to differ between two renderings


@dataclass
class Para:
    text: str  # inline `code` and **bold** are understood by both renderers


@dataclass
class Note:
    text: str
    kind: str = "warning"  # 'warning' | 'info'


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    align: str = ""  # one 'l'/'r' per column; default: first left, the rest right
    caption: str = ""
    collapsed: bool = False  # long reference tables fold away in HTML


@dataclass
class Figure:
    path: str  # relative to the report folder, e.g. 'figures/learning_curves.png'
    caption: str


@dataclass
class Pre:
    text: str


Block = Para | Note | Bullets | Table | Figure | Pre


@dataclass
class Links:
    """Where the HTML page's names lead: ``names`` a variant's or rung's name (as a cell or a bullet's lead
    shows it, without its `code` or **bold** marks) to the URL of its runs, ``pairs`` a table cell's (row
    name, column name) to the URL of that cell's runs; every URL on the MLflow UI at ``base``."""

    base: str
    names: dict[str, str] = field(default_factory=dict)
    pairs: dict[tuple[str, str], str] = field(default_factory=dict)


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
    level: int = 2


@dataclass
class Document:
    title: str
    stamp: str  # starts with STAMP_PREFIX
    intro: list[Block] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)


# ---------------------------------------------------------------- markdown
def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _aligns(table: Table) -> str:
    return table.align or ("l" + "r" * (len(table.header) - 1))


def _md_table(table: Table) -> list[str]:
    aligns = _aligns(table)
    out = []
    if table.caption:
        out += [f"*{table.caption}*", ""]
    out.append("| " + " | ".join(_md_cell(h) for h in table.header) + " |")
    out.append("|" + "|".join(":---" if a == "l" else "---:" for a in aligns) + "|")
    out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
    return out


def _md_block(block: Block) -> list[str]:
    if isinstance(block, Para):
        return [block.text]
    if isinstance(block, Note):
        return [f"> **{'Warning' if block.kind == 'warning' else 'Note'}:** {block.text}"]
    if isinstance(block, Bullets):
        return [f"- {item}" for item in block.items]
    if isinstance(block, Table):
        return _md_table(block)
    if isinstance(block, Figure):
        return [f"![{block.caption}]({block.path})", "", f"*{block.caption}*"]
    return ["```", block.text.rstrip("\n"), "```"]


def render_markdown(doc: Document) -> str:
    lines = [f"# {doc.title}", "", doc.stamp, ""]
    for block in doc.intro:
        lines += _md_block(block) + [""]
    for section in doc.sections:
        lines += [f"{'#' * section.level} {section.title}", ""]
        for block in section.blocks:
            lines += _md_block(block) + [""]
    return "\n".join(lines).rstrip("\n") + "\n"


# ---------------------------------------------------------------- html
CSS = """
:root { color-scheme: light dark; --fg: #1d1d1f; --bg: #fff; --muted: #6e6e73; --line: #d2d2d7;
        --warn: #fff4e5; --warn-line: #f5a623; --info: #eef5ff; --info-line: #4a90e2; --code: #f3f3f5; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e8e8ed; --bg: #111114; --muted: #a1a1a6; --line: #3a3a3f; --warn: #3a2a10;
          --info: #102038; --code: #222228; }
}
* { box-sizing: border-box; }
body { margin: 0 auto; padding: 1rem; max-width: 76rem; font: 16px/1.5 system-ui, -apple-system,
       "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); overflow-wrap: anywhere; }
h1 { font-size: 1.6rem; line-height: 1.2; } h2 { font-size: 1.3rem; margin-top: 2rem;
     border-bottom: 1px solid var(--line); } h3 { font-size: 1.1rem; }
.stamp, .caption { color: var(--muted); font-size: 0.9rem; }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; margin: 0.5rem 0 1rem; }
table { border-collapse: collapse; font-size: 0.9rem; font-variant-numeric: tabular-nums; }
th, td { padding: 0.3rem 0.45rem; border-bottom: 1px solid var(--line); white-space: nowrap;
         overflow-wrap: normal; word-break: normal; }  /* a name breaks at a space, never mid-word */
th { position: sticky; top: 0; background: var(--bg); white-space: normal; vertical-align: bottom; }
td.l, th.l { text-align: left; } td.r, th.r { text-align: right; }
td.l { white-space: normal; min-width: 5rem; max-width: 20rem; }  /* text wraps at spaces, numbers never */
figure { margin: 1rem 0; } figure img { display: block; max-width: 100%; height: auto; }
.note { padding: 0.5rem 0.8rem; border-left: 4px solid var(--info-line); background: var(--info);
        margin: 0.8rem 0; }
.note.warning { border-color: var(--warn-line); background: var(--warn); }
code, pre { background: var(--code); border-radius: 3px; font-size: 0.88em; }
code { padding: 0 0.2em; } pre { padding: 0.6rem; overflow-x: auto; }
details summary { cursor: pointer; color: var(--muted); }
a.runs { color: inherit; text-decoration: underline dotted; text-underline-offset: 0.2em; }
a.runs:hover { color: var(--info-line); text-decoration-style: solid; }
@media (max-width: 40rem) { body { padding: 0.6rem; font-size: 15px; } th, td { padding: 0.25rem 0.4rem; } }
""".strip()


def _inline(text: str) -> str:
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _bare(text: str) -> str:
    return text.strip().strip("`*").strip()


def _a(inner: str, url: str | None) -> str:
    """``inner`` as a link to its runs (``target="_top"``: out of any frame the page is shown in)."""
    if url is None:
        return inner
    return (f'<a class="runs" href="{html.escape(url, quote=True)}" target="_top" '
            f'title="its runs in MLflow">{inner}</a>')


def _html_table(table: Table, links: Links | None) -> list[str]:
    aligns = _aligns(table)
    names = links.names if links is not None else {}
    pairs = links.pairs if links is not None else {}
    heads = [_bare(h) for h in table.header]
    out = []
    if table.collapsed:
        out.append(f"<details><summary>{_inline(table.caption or 'table')}</summary>")
    elif table.caption:
        out.append(f'<p class="caption">{_inline(table.caption)}</p>')
    out.append('<div class="scroll"><table>')
    head = [_a(_inline(h), names.get(heads[i]) if i else None) for i, h in enumerate(table.header)]
    out.append("<thead><tr>" + "".join(f'<th class="{a}">{h}</th>' for h, a in zip(head, aligns, strict=True))
               + "</tr></thead>")
    out.append("<tbody>")
    for row in table.rows:
        lead = _bare(row[0]) if row else ""
        cells = [_a(_inline(c), names.get(lead) if i == 0 else pairs.get((lead, heads[i])))
                 for i, c in enumerate(row)]
        out.append("<tr>" + "".join(f'<td class="{a}">{c}</td>' for c, a in zip(cells, aligns, strict=True))
                   + "</tr>")
    out.append("</tbody></table></div>")
    if table.collapsed:
        out.append("</details>")
    return out


def _html_bullet(item: str, links: Links | None) -> str:
    """A bullet whose lead (up to its first colon) names a variant or rung: that lead linked."""
    lead, colon, rest = item.partition(":")
    url = links.names.get(_bare(lead)) if links is not None and colon else None
    if url is None:
        return f"<li>{_inline(item)}</li>"
    return f"<li>{_a(_inline(lead), url)}:{_inline(rest)}</li>"


def _html_block(block: Block, root: Path, links: Links | None = None) -> list[str]:
    if isinstance(block, Para):
        return [f"<p>{_inline(block.text)}</p>"]
    if isinstance(block, Note):
        label = "Warning" if block.kind == "warning" else "Note"
        return [f'<div class="note {block.kind}"><strong>{label}:</strong> {_inline(block.text)}</div>']
    if isinstance(block, Bullets):
        return ["<ul>"] + [_html_bullet(item, links) for item in block.items] + ["</ul>"]
    if isinstance(block, Table):
        return _html_table(block, links)
    if isinstance(block, Figure):
        alt = html.escape(block.caption, quote=True)
        return [f'<figure><img src="{_data_uri(root / block.path)}" alt="{alt}">',
                f'<figcaption class="caption">{_inline(block.caption)}</figcaption></figure>']
    return [f"<pre>{html.escape(block.text.rstrip(chr(10)), quote=False)}</pre>"]


def render_html(doc: Document, root: Path, links: Links | None = None) -> str:
    """One page; ``root`` is the report folder the figure paths are relative to; ``links`` (optional) lead
    its variants' and rungs' names to their runs in MLflow."""
    head = [link_base_meta(links.base)] if links is not None else []
    lines = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">', *head,
             f"<title>{html.escape(doc.title)}</title>", f"<style>\n{CSS}\n</style>", "</head>", "<body>",
             f"<h1>{_inline(doc.title)}</h1>", f'<p class="stamp">{html.escape(doc.stamp)}</p>']
    if links is not None and (links.names or links.pairs):
        names = "Each variant and rung links" if links.pairs else "Each variant links"
        lines.append(f'<p class="stamp">{names} to its runs in the MLflow UI at <span class="mlflow-ui">'
                     f'{html.escape(links.base)}</span> (<code>ablate ui</code> serves this page with its '
                     "links on the UI it starts).</p>")
    for block in doc.intro:
        lines += _html_block(block, root, links)
    for section in doc.sections:
        lines.append(f"<h{section.level}>{_inline(section.title)}</h{section.level}>")
        for block in section.blocks:
            lines += _html_block(block, root, links)
    lines += ["</body>", "</html>"]
    return "\n".join(lines) + "\n"
