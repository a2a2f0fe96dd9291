"""The pages' HTML: one layout, and every stored or requested text escaped on the way in."""

from __future__ import annotations

import html
from urllib.parse import urlencode

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1d232a; background: #f6f7f9; }
header { background: #24313f; color: #fff; padding: .6rem 1.2rem; display: flex; gap: 1.2rem;
         align-items: baseline; }
header a { color: #cfe3ff; text-decoration: none; }
header strong { font-size: 1.05rem; }
main { padding: 1rem 1.2rem; max-width: 70rem; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { text-align: left; padding: .3rem .6rem; border-bottom: 1px solid #e2e5ea;
         vertical-align: top; }
th { background: #eef1f5; font-weight: 600; }
td.key { font-family: ui-monospace, monospace; word-break: break-all; }
pre, textarea { font: 13px/1.4 ui-monospace, monospace; background: #fff;
                border: 1px solid #d5d9e0; padding: .6rem; }
pre { overflow: auto; max-height: 28rem; }
textarea { width: 100%; box-sizing: border-box; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem; }
dt { color: #5b6673; }
dd { margin: 0; font-family: ui-monospace, monospace; word-break: break-all; }
.notice { padding: .5rem .8rem; border-radius: 4px; margin: .6rem 0; }
.ok { background: #e3f5e8; border: 1px solid #9fd3ad; }
.error { background: #fde8e8; border: 1px solid #eba5a5; }
form.filter { margin: .6rem 0; display: flex; gap: .5rem; }
button { padding: .3rem .9rem; }
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
"""No script runs on these pages, and no other site may frame them or receive their forms."""


def esc(text: object) -> str:
    """`text` as HTML text or a quoted attribute value."""
    return html.escape(str(text), quote=True)


def href(path: str, **query: str | None) -> str:
    """An escaped link to `path` with the query's non-None values."""
    given = {name: value for name, value in query.items() if value is not None}
    return esc(path + ("?" + urlencode(given) if given else ""))


def layout(title: str, body: str) -> str:
    """A whole page: the navigation, then `body` (already HTML)."""
    nav = "".join(
        f'<a href="{href("/", view=view)}">{esc(label)}</a>'
        for view, label in (
            ("users", "Users"),
            ("conversations", "Conversations"),
            ("sessions", "Sessions"),
            ("app", "App state"),
            ("all", "All keys"),
        )
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)} · agent-state inspector</title><style>{STYLE}</style></head>"
        f"<body><header><strong>agent-state inspector</strong>{nav}</header>"
        f"<main><h1>{esc(title)}</h1>{body}</main></body></html>"
    )
