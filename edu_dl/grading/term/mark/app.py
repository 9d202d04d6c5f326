"""The Jupyter Server extension of ``edu-dl mark``: the page, its JSON API and the feedback pages.

Jupyter Server does the serving: the token (or its login cookie), the XSRF check on every
POST, the binding to 127.0.0.1; its services that read files or run code are left out, so the
server holds no kernel (and may run as root, as a grading machine's user often is). Every
handler is ``web.authenticated``; each sends a Content-Security-Policy that lets the page run
only its own script, and a feedback page or an answer (shown in a sandboxed frame) none.
"""

from __future__ import annotations

import html
import json
from typing import Any, ClassVar

from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.extension.application import ExtensionApp
from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyter_server.serverapp import ServerApp
from tornado import web

from edu_dl.grading.stages.feedback import POLICY
from edu_dl.grading.term.manual import ManualSheetError
from edu_dl.grading.term.mark import page
from edu_dl.grading.term.mark.store import Desk, MarkError, answer_page, feedback_page

URL = "/edu-dl-mark"
PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
               "img-src 'self'; frame-src 'self'; base-uri 'none'; form-action 'none'; "
               "frame-ancestors 'none'")
# A feedback page: its own policy, and a sandbox (no script, no form, an origin of its own).
FEEDBACK_POLICY = f"{POLICY}; frame-ancestors 'none'; sandbox"
# An answer, rendered as on its feedback page: the same, shown in a frame of the page only.
ANSWER_POLICY = f"{POLICY}; frame-ancestors 'self'; sandbox"


class _Handler(ExtensionHandlerMixin, JupyterHandler):
    """The extension's handlers hold the desk."""

    policy = PAGE_POLICY

    def initialize(self, name: str, *args: Any, desk: Desk | None = None,
                   **kwargs: Any) -> None:
        super().initialize(name, *args, **kwargs)
        assert desk is not None
        self.desk = desk

    @property
    def content_security_policy(self) -> str:
        return self.policy


class PageHandler(_Handler):
    """The page: the list of rows and the form."""

    @web.authenticated
    def get(self) -> None:
        xsrf = self.xsrf_token.decode() if isinstance(self.xsrf_token, bytes) else self.xsrf_token
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(page.HTML.format(base=html.escape(self.base_url.rstrip("/") + URL),
                                     xsrf=html.escape(xsrf)))


class AssetHandler(_Handler):
    """The page's script and stylesheet."""

    @web.authenticated
    def get(self, name: str) -> None:
        kind, text = {"mark.js": ("text/javascript", page.JS),
                      "mark.css": ("text/css", page.CSS)}[name]
        self.set_header("Content-Type", f"{kind}; charset=utf-8")
        self.finish(text)


class FeedbackHandler(_Handler):
    """A row's feedback page (plots and outputs), as edu-dl grade wrote it."""

    policy = FEEDBACK_POLICY
    made = staticmethod(feedback_page)

    @web.authenticated
    def get(self, index: str) -> None:
        try:
            data = self.made(self.desk, int(index))
        except MarkError as exc:
            self.set_status(404)
            self.set_header("Content-Type", "text/plain; charset=utf-8")
            self.finish(str(exc))
            return
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(data)


class AnswerHandler(FeedbackHandler):
    """A row's answer (its cell, source and outputs) rendered as on its feedback page, for the
    page's sandboxed frame."""

    policy = ANSWER_POLICY
    made = staticmethod(answer_page)


class _Api(ExtensionHandlerMixin, APIHandler):
    def initialize(self, name: str, *args: Any, desk: Desk | None = None,
                   **kwargs: Any) -> None:
        super().initialize(name, *args, **kwargs)
        assert desk is not None
        self.desk = desk

    def reply(self, body: Any, status: int = 200) -> None:
        """JSON, with a status."""
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))


class RowsHandler(_Api):
    """GET: every row, as the list shows it."""

    @web.authenticated
    def get(self) -> None:
        try:
            self.reply(self.desk.listing())
        except ManualSheetError as exc:
            self.reply({"error": str(exc)}, 500)


class RowHandler(_Api):
    """GET: one row, with its answer; POST {points, comment}: save it."""

    @web.authenticated
    def get(self, index: str) -> None:
        try:
            self.reply(self.desk.detail(int(index)))
        except MarkError as exc:
            self.reply({"error": str(exc)}, 404)
        except ManualSheetError as exc:
            self.reply({"error": str(exc)}, 500)

    @web.authenticated
    def post(self, index: str) -> None:
        try:
            body = json.loads(self.request.body or b"{}")
            if not isinstance(body, dict):
                raise ValueError("not an object")
            points, comment = body.get("points", ""), body.get("comment", "")
            if not isinstance(points, (str, int, float)) or not isinstance(comment, str):
                raise ValueError("points must be a number or text, comment text")
        except ValueError as exc:
            self.reply({"error": f"not a save the page sends ({exc})"}, 400)
            return
        try:
            self.reply(self.desk.save(int(index), str(points), comment))
        except MarkError as exc:
            self.reply({"error": str(exc)}, 400)
        except (ManualSheetError, OSError) as exc:
            self.reply({"error": f"not saved: {exc}"}, 500)


class MarkServer(ServerApp):
    """Jupyter Server without the services that read files or run code (contents, files,
    kernels, sessions, terminals, nbconvert): only login, the shutdown API and the extension."""

    # A shorter tuple than the base class's, which mypy reads as a fixed length.
    default_services = ("api", "auth", "security", "shutdown")  # type: ignore[assignment]


class MarkApp(ExtensionApp):
    """``edu-dl mark``'s extension: set ``MarkApp.desk`` before the server starts."""

    name = "edu_dl_mark"
    extension_url = URL
    load_other_extensions = False
    serverapp_class = MarkServer
    desk: ClassVar[Desk | None] = None

    @classmethod
    def get_extension_package(cls) -> str:
        """This module: it declares the extension point (not the whole edu_dl package)."""
        return __name__

    def initialize_handlers(self) -> None:
        """The page, its assets, the API, the feedback pages and the answers, all below URL."""
        extra = {"desk": MarkApp.desk}
        self.handlers.extend([
            (rf"{URL}/?", PageHandler, extra),
            (rf"{URL}/(mark\.js|mark\.css)", AssetHandler, extra),
            (rf"{URL}/api/rows", RowsHandler, extra),
            (rf"{URL}/api/rows/([0-9]{{1,9}})", RowHandler, extra),
            (rf"{URL}/page/([0-9]{{1,9}})", FeedbackHandler, extra),
            (rf"{URL}/answer/([0-9]{{1,9}})", AnswerHandler, extra),
        ])


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    """Jupyter Server's entry: this module's ExtensionApp."""
    return [{"module": __name__, "app": MarkApp}]
