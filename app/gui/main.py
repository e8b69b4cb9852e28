"""Entry point of the desktop window: ``simile [FOLDER] [--index DIR] [--query IMAGE
[--box X,Y,W,H]] [--view results|grid-results|matches|duplicates|clusters] [--k K|auto]
[--screenshot PNG]``.

``--view grid-results`` shows the query's results in the main grid (View ▸ Results in
the Grid) once they are in.

With ``--screenshot`` the window is driven headlessly (works with
``QT_QPA_PLATFORM=offscreen``): open the folder, index it if needed, run the
query (or, for ``clusters``, group the photos and show the first group's best photo's
feature mask), show the view, write the window to PNG and exit 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app._argparse import Parser

__all__ = ["build_parser", "quit_on_signals", "run_gui"]

VIEWS = ("results", "grid-results", "matches", "duplicates", "clusters")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="simile",
        description="Open the Simile window on a folder of photos (the demo photos or the "
        "last folder by default).",
    )
    p.add_argument("folder", nargs="?", help="folder of photos to open")
    p.add_argument("--index", metavar="DIR", help="index folder (default: FOLDER/.simile)")
    p.add_argument("--query", metavar="IMAGE", help="search with this image once indexed")
    p.add_argument(
        "--box",
        metavar="X,Y,W,H",
        help="with --query: search for what lies in this box of the image only (pixels of "
        "the photo as displayed, at its full size)",
    )
    p.add_argument(
        "--view",
        choices=VIEWS,
        default="results",
        help="view to show (grid-results: the results of --query in the main grid)",
    )
    p.add_argument("--method", help="retrieval method (hybrid, uniform, vocabulary, wta, …)")
    p.add_argument("--screenshot", metavar="PNG", help="write the window to PNG and exit")
    p.add_argument("--size", default="1360x840", metavar="WxH", help="window size for screenshots")
    p.add_argument("--threshold", type=float, help="duplicate threshold (duplicates view)")
    p.add_argument("--k", metavar="K|auto", help="number of groups (categories view)")
    p.add_argument("--timeout", type=float, default=900.0, help=argparse.SUPPRESS)
    return p


def run_gui(argv: list[str]) -> int:
    """Run the desktop application; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    if args.screenshot and not args.folder:
        from app.gui.state import demo_folder

        demo = demo_folder()
        if demo is None:
            parser.error("--screenshot needs a FOLDER (the demo photos are not installed)")
        args.folder = str(demo)
    if args.folder and not Path(args.folder).is_dir():
        parser.error(f"{args.folder} is not a folder")
    if args.query and not Path(args.query).is_file():
        parser.error(f"--query: {args.query} is not a file")
    if args.box is not None:
        from engine.index.region import parse_box

        if not args.query:
            parser.error("--box needs --query IMAGE")
        try:
            args.box = parse_box(args.box)
        except ValueError as exc:
            parser.error(f"--box: {exc}")

    try:
        from PySide6.QtWidgets import QApplication
    except ImportError as exc:  # pragma: no cover - packaging problem
        print(f"simile: error: the desktop window needs PySide6 ({exc})", file=sys.stderr)
        return 1

    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "simile"])
    try:
        from app.gui.theme import apply_theme

        apply_theme(app)
        if args.screenshot:
            return _screenshot(app, args)
        return _interactive(app, args)
    except Exception as exc:  # start-up failure: plain words, a dialog if no terminal
        msg = f"Simile could not start: {exc}"
        print(f"simile: error: {msg}", file=sys.stderr)
        if not (sys.stderr and sys.stderr.isatty()):
            from PySide6.QtWidgets import QMessageBox

            QMessageBox.critical(None, "Simile", msg)
        return 1


def _interactive(app, args) -> int:
    from PySide6.QtCore import QSettings, QTimer

    from app.gui.state import demo_folder
    from app.gui.window import MainWindow

    settings = QSettings()
    win = MainWindow(settings)
    win.show()
    quit_on_signals(app, win.close)
    folder = args.folder
    welcome = False
    if folder is None:
        last = settings.value("lastFolder")
        if last and Path(str(last)).is_dir():
            folder = str(last)
        else:  # the first start (or the last folder is gone): the demo and a welcome
            demo = demo_folder()
            folder = str(demo) if demo is not None else None
            welcome = True
    if args.method:
        win.set_method(args.method, rerun=False)
    if folder is not None:
        QTimer.singleShot(0, lambda: win.open_folder(folder, args.index))
        if args.query:
            QTimer.singleShot(0, lambda: win.query_photo(args.query, args.box))
    if welcome:  # after the folder opened (opening a folder clears the banner)
        QTimer.singleShot(0, win.show_welcome)
    if args.view == "grid-results" and args.query:

        def results_in_grid() -> None:  # (once, when the first results are in)
            win.results_changed.disconnect(results_in_grid)
            win.show_results_in_grid()

        win.results_changed.connect(results_in_grid)
    elif args.view not in ("results", "grid-results"):
        QTimer.singleShot(0, lambda: win.show_view(_view_name(args.view)))
    return app.exec()


def quit_on_signals(app, close) -> None:
    """Close the window as its close button does when the process is asked to end.

    SIGTERM (a log-out, ``kill PID``), SIGINT (Ctrl+C in the terminal that started the
    window) and SIGHUP (that terminal closed) would otherwise end the process at once,
    skipping what closing the window does: cancel the background work and wait for it,
    write the settings and remove the window's temporary folder. While Qt's event loop runs,
    Python's handlers only run when Python code does, so the signal's arrival is written to
    a socket Qt watches (:func:`signal.set_wakeup_fd`), whose notifier wakes Python up.
    """
    import signal
    import socket

    from PySide6.QtCore import QSocketNotifier

    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    notifier = QSocketNotifier(reader.fileno(), QSocketNotifier.Type.Read, app)

    def drain() -> None:  # (the handler itself runs once Python is back in control)
        try:
            reader.recv(64)
        except OSError:
            pass

    def ended(*_args) -> None:
        close()
        app.quit()  # (also ends a dialog's own event loop, which would keep the process)

    notifier.activated.connect(drain)
    app._signal_sockets = (reader, writer, notifier)  # kept alive with the application
    for name in ("SIGTERM", "SIGINT", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), ended)


def _int_or(text: str):
    try:
        return int(text)
    except ValueError:
        return text


def _view_name(view: str) -> str:
    return {"results": "library", "grid-results": "library", "clusters": "categories"}.get(
        view, view
    )


def _screenshot(app, args) -> int:
    import tempfile

    from PySide6.QtCore import QSettings, QTimer

    from app.gui.window import MainWindow

    w, _, h = args.size.partition("x")
    tmp = tempfile.TemporaryDirectory(prefix="simile-shot-")
    settings = QSettings(str(Path(tmp.name) / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings, persist=False)
    win.resize(int(w), int(h))
    win.show()
    if args.method:
        win.set_method(args.method, rerun=False)
    state = {"code": 1, "error": None}

    def finish(code: int, error: str | None = None) -> None:
        state["code"], state["error"] = code, error
        app.exit(code)

    def fail(text: str) -> None:
        finish(1, text)

    def grab_when_ready(tries: int = 0) -> None:
        if not win.thumbs.is_idle() and tries < 300:
            QTimer.singleShot(50, lambda: grab_when_ready(tries + 1))
            return
        app.processEvents()
        out = Path(args.screenshot)
        out.parent.mkdir(parents=True, exist_ok=True)
        if not win.grab().save(str(out), "PNG"):
            fail(f"could not write {out}")
            return
        finish(0)

    def settle() -> None:
        QTimer.singleShot(150, grab_when_ready)

    def after_query() -> None:
        win.results_changed.disconnect(after_query)
        if win.results.rowCount() == 0:
            fail("the search returned no results")
            return
        if args.view == "matches":
            best = win.results.best_other()
            if best is None:
                fail("no other photo to match against")
                return
            win.match_shown.connect(settle)
            win.show_matches(best)
        else:
            win.show_view("library")
            if args.view == "grid-results":
                win.show_results_in_grid()
            settle()

    def after_index(coll) -> None:
        win.indexing_finished.disconnect(after_index)
        if coll is None or win.photos.rowCount() == 0:
            fail(state["error"] or "no photos could be indexed")
            return
        if args.view == "duplicates":
            win.duplicates_shown.connect(settle)
            win.find_duplicates(args.threshold)
            return
        if args.view == "clusters":
            if "categories" not in win.views:
                fail("the categories view is not available")
                return
            view = win.views["categories"]
            k_index = None
            if args.k:
                k_index = view.k_combo.findData(args.k if args.k == "auto" else _int_or(args.k))
                if k_index < 0:
                    fail(f"--k must be 'auto' or 2 to {view.k_combo.count()}, got {args.k}")
                    return

            def grouped() -> None:  # show the first group's best photo's feature mask too
                view.grouping_shown.disconnect(grouped)
                g = view.grouping
                if g is None:
                    fail("the photos could not be grouped")
                    return
                view.mask_shown.connect(settle)
                view.show_mask(g.paths[int(g.members(0)[0])])

            view.grouping_shown.connect(grouped)
            win.show_view("categories")  # groups the photos when first shown (none saved)
            if k_index is not None:  # group again with the requested number of groups
                view.k_combo.setCurrentIndex(k_index)
                view.regroup()
            elif view.grouping is not None and not view._busy:
                view.grouping_shown.emit()  # the saved grouping
            return
        query = args.query or win.photos.path(0)
        win.results_changed.connect(after_query)
        win.query_photo(query, args.box)

    win.error_shown.connect(fail)
    win.indexing_finished.connect(after_index)
    QTimer.singleShot(0, lambda: win.open_folder(args.folder, args.index))
    QTimer.singleShot(int(args.timeout * 1000), lambda: fail("timed out"))
    app.exec()
    win.persist = False
    win.close()
    tmp.cleanup()
    if state["code"] != 0:
        print(f"simile: error: {state['error'] or 'screenshot failed'}", file=sys.stderr)
        return 1
    print(f"wrote {args.screenshot}")
    return 0
