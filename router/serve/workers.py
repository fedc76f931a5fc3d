"""Run the server: in this process (``--workers 1``), or as a supervisor of N worker processes.

With N workers the supervisor binds the socket, creates the run directory (router.serve.rundir: the
workers' metrics files and reload target), and spawns N processes: each a fresh interpreter that loads
its own Router and accepts connections on the shared socket. The supervisor then

- forwards SIGHUP to every worker (each reloads its model and config);
- on SIGUSR1 (a worker performed an admin reload) sends SIGHUP to the other workers, which load the
  paths that worker recorded;
- replaces a worker that exits (the new one loads its model before it accepts connections), and gives
  up if one exits within ``QUICK_EXIT`` seconds of its start ``QUICK_EXITS`` times in a row (it would
  fail the same way again);
- on SIGTERM/SIGINT sends SIGTERM to the workers, which finish their requests in flight
  (``graceful_timeout``), and removes the run directory.

A worker whose supervisor is gone (killed with SIGKILL, which it cannot handle) stops by itself within
``SUPERVISOR_POLL`` seconds, as on SIGTERM, so the port is freed for the next ``serve``.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from router.serve.rundir import METRICS_DIR, target_origin
from router.serve.settings import ServeSettings

log = logging.getLogger("intent_router.serve")
QUICK_EXIT = 10.0  # seconds
QUICK_EXITS = 3
SUPERVISOR_POLL = 0.5  # seconds between a worker's checks that its supervisor is alive


def run(settings: ServeSettings) -> int:
    """Serve until SIGINT/SIGTERM; requests in flight get ``graceful_timeout`` seconds. Returns the exit
    code; raises ValueError for a configuration that cannot serve (key file, limits, decision log)."""
    _configure_logging(settings)
    if settings.key_file is None:
        log.warning(
            "no key file: listening on loopback only (%s); every local caller may use every role",
            settings.host,
        )
    else:
        log.info("key file %s: roles come from API keys", settings.key_file)
    if settings.workers > 1:
        return _supervise(settings)
    import uvicorn

    from router.serve.app import create_app

    app = create_app(settings)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the app's handler reloads on it
    _server(uvicorn.Config(app, **_uvicorn_options(settings))).run()
    return 0


def _server(config):
    """A uvicorn server whose stop on SIGTERM is a clean exit (0, as the --workers supervisor's), not the
    signal raised again once requests in flight are done (exit 143)."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            super().handle_exit(sig, frame)
            if sig == signal.SIGTERM and sig in self._captured_signals:
                self._captured_signals.remove(sig)

    return Server(config)


def _configure_logging(settings: ServeSettings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(process)d]: %(message)s",
    )


def _uvicorn_options(settings: ServeSettings) -> dict:
    return dict(
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=settings.access_log,
        timeout_graceful_shutdown=settings.graceful_timeout,
        timeout_keep_alive=settings.keep_alive_timeout,
    )


def _check(settings: ServeSettings) -> None:
    """What each worker would find wrong at start, found once before any starts."""
    from router.serve.auth import KeyStore
    from router.serve.state import open_decision_log

    if settings.key_file is not None:
        KeyStore.load(settings.key_file)
    dlog = open_decision_log(settings)
    if dlog is not None:
        dlog.close()


def _worker(settings: ServeSettings, sock: socket.socket) -> None:
    """A worker process: its own app and Router, serving on the supervisor's socket."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the app's handler reloads on it
    _configure_logging(settings)
    _stop_with(os.getppid(), settings.graceful_timeout)
    import uvicorn

    from router.serve.app import create_app

    config = uvicorn.Config(create_app(settings), **_uvicorn_options(settings))
    _server(config).run(sockets=[sock])


def _stop_with(supervisor: int, graceful_timeout: float, poll: float = SUPERVISOR_POLL) -> None:
    """Watch the supervisor from a daemon thread. A supervisor killed with SIGKILL cannot stop its
    workers, and they would go on holding the port: once this process has another parent, it stops as
    on SIGTERM (requests in flight get ``graceful_timeout``), and exits outright if that hangs."""

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(poll)
        log.warning("the supervisor (pid %d) is gone: this worker stops", supervisor)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(graceful_timeout + 5)
        os._exit(1)

    threading.Thread(target=watch, name="supervisor-watch", daemon=True).start()


def _supervise(settings: ServeSettings) -> int:
    import uvicorn

    _check(settings)
    run_dir = Path(tempfile.mkdtemp(prefix="intent-router-serve-"))
    try:
        (run_dir / METRICS_DIR).mkdir()
        # prometheus_client reads it when a worker imports it: every worker writes its metrics there
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(run_dir / METRICS_DIR)
        sock = uvicorn.Config(app=None, host=settings.host, port=settings.port).bind_socket()
        try:
            return Supervisor(replace(settings, run_dir=str(run_dir)), sock).run()
        finally:
            sock.close()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


class Supervisor:
    def __init__(self, settings: ServeSettings, sock: socket.socket) -> None:
        self.settings, self.sock = settings, sock
        self.run_dir = Path(settings.run_dir)
        self.ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no state shared with us
        self.workers: list = []
        self.started: list[float] = []
        self.quick_exits: list[int] = []
        self.signals: list[int] = []

    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(sig, lambda sig, frame: self.signals.append(sig))
        n = self.settings.workers
        self.workers, self.started, self.quick_exits = [None] * n, [0.0] * n, [0] * n
        for i in range(n):
            self._start(i)
        log.info(
            "serving on http://%s:%d with %d workers (pids %s); run directory %s",
            self.settings.host,
            self.settings.port,
            n,
            ", ".join(str(w.pid) for w in self.workers),
            self.run_dir,
        )
        code = 0
        while True:
            time.sleep(0.2)
            if not self._handle_signals():
                break
            if not self._replace_exited():
                code = 1
                break
        self._stop()
        return code

    def _start(self, i: int, replacement: bool = False) -> None:
        # a replacement loads its model before it accepts connections: the others serve meanwhile
        settings = replace(self.settings, load_before_serving=replacement)
        w = self.ctx.Process(
            target=_worker, args=(settings, self.sock), name=f"intent-router-worker-{i}", daemon=False
        )
        w.start()
        self.workers[i], self.started[i] = w, time.monotonic()

    def _handle_signals(self) -> bool:
        """False once asked to stop."""
        while self.signals:
            sig = self.signals.pop(0)
            if sig in (signal.SIGINT, signal.SIGTERM):
                log.info("%s: stopping the workers", signal.Signals(sig).name)
                return False
            if sig == signal.SIGHUP:
                log.info("SIGHUP: every worker reloads its model and config")
                self._signal_workers(signal.SIGHUP)
            elif sig == signal.SIGUSR1:  # a worker recorded an admin reload's paths
                self._signal_workers(signal.SIGHUP, skip=target_origin(self.run_dir))
        return True

    def _signal_workers(self, sig: int, skip: int | None = None) -> None:
        for w in self.workers:
            if w.pid != skip and w.is_alive():
                os.kill(w.pid, sig)

    def _replace_exited(self) -> bool:
        """Start a worker in place of each that exited; False if one keeps exiting right after its start."""
        from prometheus_client import multiprocess

        for i, w in enumerate(self.workers):
            if w.is_alive():
                continue
            w.join()
            multiprocess.mark_process_dead(w.pid, str(self.run_dir / METRICS_DIR))
            quick = time.monotonic() - self.started[i] < QUICK_EXIT
            self.quick_exits[i] = self.quick_exits[i] + 1 if quick else 0
            if self.quick_exits[i] >= QUICK_EXITS:
                log.error(
                    "worker %d exited %d times within %.0f s of its start (exit code %s); stopping",
                    i,
                    QUICK_EXITS,
                    QUICK_EXIT,
                    w.exitcode,
                )
                return False
            log.warning("worker %d (pid %d) exited with code %s; starting another", i, w.pid, w.exitcode)
            self._start(i, replacement=True)
        return True

    def _stop(self) -> None:
        self._signal_workers(signal.SIGTERM)
        deadline = time.monotonic() + self.settings.graceful_timeout + 10
        for w in self.workers:
            w.join(max(0.0, deadline - time.monotonic()))
            if w.is_alive():
                log.warning("worker pid %d did not stop in time; killing it", w.pid)
                w.kill()
                w.join()
        log.info("all workers stopped")
