"""The landing page `ablate ui` opens a study on: the study's report (its verdict table, tables and
figures: the `report.html` that `ablate report` logged in the parent run), served from a small HTTP server
of its own beside the MLflow server, with the report's links to each variant's and rung's runs pointed at
that MLflow server.

Why a page of its own: MLflow 3 shows a logged HTML artifact in an iframe sandboxed to ``allow-scripts``
alone, where no link can open a page (``target="_top"`` needs ``allow-top-navigation``, ``_blank``
``allow-popups``), so a report read inside MLflow cannot lead to its runs. The report is rendered with its
links on the MLflow UI it expects (`comparison_view.ui_base`), named in the page's ``<meta
name="ablate-mlflow-ui">``; `relinked` moves them to the UI actually serving. Binds where the MLflow server
does (127.0.0.1 unless told).
"""

from __future__ import annotations

import html
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from ablate.tracking.mlflow_store import download_artifacts

LINK_BASE_META = "ablate-mlflow-ui"  # <meta name=... content=BASE>: the UI the report's run links point at
_META = re.compile(rf'<meta name="{LINK_BASE_META}" content="([^"]*)">')


def link_base_meta(base_url: str) -> str:
    """The head line naming the MLflow UI a report's run links point at."""
    return f'<meta name="{LINK_BASE_META}" content="{html.escape(base_url, quote=True)}">'


def link_base(page: str) -> str | None:
    """The MLflow UI a rendered report's run links point at (None: a report without them)."""
    found = _META.search(page)
    return html.unescape(found.group(1)) if found else None


def relinked(page: str, base_url: str) -> str:
    """``page`` with its run links (every ``href`` on its link base) on ``base_url`` instead."""
    old = link_base(page)
    if old is None or old == base_url:
        return page
    before, after = html.escape(old, quote=True), html.escape(base_url, quote=True)
    page = page.replace(f'href="{before}/#/', f'href="{after}/#/').replace(
        f'<span class="mlflow-ui">{before}</span>', f'<span class="mlflow-ui">{after}</span>')
    return _META.sub(link_base_meta(base_url), page, count=1)


def with_nav(page: str, links: list[tuple[str, str]]) -> str:
    """``page`` with a line of links (text, URL) at the top of its body: where the landing page leads in
    MLflow besides its variants (the runs compared, the parent run)."""
    items = " · ".join(f'<a href="{html.escape(url, quote=True)}">{html.escape(text)}</a>'
                       for text, url in links)
    return page.replace("<body>", f'<body>\n<p class="stamp">In MLflow: {items}</p>', 1) if items else page


def logged_report(run_id: str, path: str, uri: str) -> str:
    """The text of the report page logged at ``path`` in the run ``run_id`` of the store at ``uri``."""
    return Path(download_artifacts(run_id, path, tracking_uri=uri)).read_text(encoding="utf-8")


class LandingServer:
    """One page served at ``/`` over HTTP from a daemon thread, until `stop`."""

    def __init__(self, page: str, host: str = "127.0.0.1", port: int = 0) -> None:
        body = page.encode("utf-8")

        class Page(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?")[0] not in ("/", "/index.html", "/report.html"):
                    self.send_error(404, "only the report is served here: /")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
                pass  # `ablate ui`'s terminal shows its links, not a line per request

        server = type("Server", (ThreadingHTTPServer,), {"address_family": socket.AF_INET6}) if ":" in host \
            else ThreadingHTTPServer
        self._server = server((host, port), Page)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="ablate-landing", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        shown = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(str(host), str(host))
        return f"http://[{shown}]:{port}/" if ":" in shown else f"http://{shown}:{port}/"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
