"""``edu-dl mark OUT``: its parser, and the handler that starts the server (imported only then,
so ``edu-dl --help`` stays instant)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from edu_dl.grading.trust.text import say

Subparsers = Any  # argparse's _SubParsersAction is private


def add_mark(subparsers: Subparsers) -> None:
    """Register ``edu-dl mark OUT``: grade the rows that need a person, in a browser."""
    parser = subparsers.add_parser(
        "mark",
        help="grade by hand in a browser: the rows that need a person, saved to the gradebook",
        description="Serve a local page (Jupyter Server, 127.0.0.1, with a token) listing "
        "every row of OUT that needs a person: the answer, its feedback page, the source "
        "cell beside it, points and a comment. Each save keeps the grade in the gradebook "
        "database, which the next `edu-dl grade` applies, and writes the sheet again "
        "(manual.csv's format) from it; several people may grade at once.")
    parser.add_argument("out", type=Path, metavar="OUT", help="the --out folder of edu-dl grade")
    parser.add_argument("--sheet", type=Path, metavar="FILE",
                        help="the filled-in sheet to read and save to (default: the course "
                        "config's [mark] sheet or [grade] manual, else manual-filled.csv "
                        "beside OUT)")
    parser.add_argument("--source", type=Path, metavar="PATH",
                        help="the solutions folder, to show each answer's source cell "
                        "(default: the course config's, as edu-dl grade's)")
    parser.add_argument("--anonymous", action="store_true",
                        help="show students as 'student 1', 'student 2' ...; names stay on "
                        "this side (the page is never sent one), and an answer that names "
                        "its student (the id, or a name or e-mail the roster gives) shows "
                        "the pseudonym instead")
    parser.add_argument("--roster", type=Path, metavar="CSV",
                        help="the students, as edu-dl grade --roster reads them: with "
                        "--anonymous, their names and e-mails are hidden in the answers too "
                        "(default: the course config's, as edu-dl grade's)")
    parser.add_argument("--overrides", action="store_true",
                        help="list the autograded rows too: one may be overridden, with a "
                        "reason in the comment")
    parser.add_argument("--port", type=int, metavar="N",
                        help="the port (default: Jupyter's, 8888 or the next free one)")
    parser.add_argument("--no-browser", action="store_true", help="do not open a browser")
    parser.add_argument("--db", metavar="URL", help="the gradebook database, as edu-dl grade "
                        "--db (default: the course config's, as edu-dl grade's, else "
                        "sqlite:///OUT/gradebook.db)")
    parser.set_defaults(handler=run_mark)


def run_mark(args: argparse.Namespace) -> int:
    """``edu-dl mark``: serve the page until interrupted; 2 when OUT, the sheet or the roster
    cannot be read, or the server would run without a token."""
    from edu_dl.grading.term.db import DatabaseError, store
    from edu_dl.grading.term.manual import ManualSheetError
    from edu_dl.grading.term.mark.store import Desk, default_sheet
    from edu_dl.grading.term.policy import PolicyError, read_roster

    out: Path = args.out
    url = args.db or None
    try:
        roster = read_roster(args.roster) if args.roster is not None and args.anonymous \
            else {}
    except PolicyError as exc:
        say(f"edu-dl mark: {exc}", sys.stderr)
        return 2
    try:
        book = store(out, url)
    except DatabaseError as exc:
        say(f"edu-dl mark: {exc}", sys.stderr)
        return 2
    if not book.exists():
        say(f"edu-dl mark: {out} holds no gradebook (no {book.file}); grade first: edu-dl "
            f"grade SUBMISSIONS --source SOURCE --out {out}", sys.stderr)
        return 2
    sheet = default_sheet(out, args.sheet)
    names = {student: (person.first_name, person.last_name, person.email)
             for student, person in roster.items()}
    try:
        desk = Desk(out, sheet, anonymous=args.anonymous, overrides=args.overrides,
                    source=args.source, log=lambda text: say(f"warning: {text}", sys.stderr),
                    db_url=url, names=names)
    except (ManualSheetError, DatabaseError) as exc:
        say(f"edu-dl mark: {exc}", sys.stderr)
        return 2
    return serve(desk, args.port, open_browser=not args.no_browser)


def serve(desk: Any, port: int | None, *, open_browser: bool) -> int:
    """Start Jupyter Server with the extension on 127.0.0.1 and print the page's URL."""
    from edu_dl.grading.term.mark.app import URL, MarkApp

    MarkApp.desk = desk
    argv = ["--ServerApp.ip=127.0.0.1", f"--ServerApp.open_browser={open_browser}",
            "--ServerApp.allow_root=True"]  # no kernel, no file served: see app.MarkServer
    if port is not None:
        argv += [f"--ServerApp.port={port}", "--ServerApp.port_retries=0"]
    server = MarkApp.initialize_server(argv=argv)
    token = server.identity_provider.token
    if not token:
        say("edu-dl mark: the Jupyter configuration gives the server no token; refusing to "
            "serve students' answers without one (unset an empty ServerApp/IdentityProvider "
            "token)", sys.stderr)
        return 2
    rows = len(desk.items)
    say(f"{rows} row(s) to look at; saving to {desk.sheet_path}\n"
        f"open {server.connection_url.rstrip('/')}{URL}?token={token}\n"
        f"then: edu-dl grade ... --manual {desk.sheet_path}", sys.stdout)
    sys.stdout.flush()
    try:
        server.start()
    except KeyboardInterrupt:
        pass
    return 0
