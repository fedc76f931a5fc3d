"""The server's state in one process: its Router (through the Engine), where the Router was loaded from,
the API keys, the decision log and the metrics; loading at start-up, and reloading.

A reload (SIGHUP, or POST /admin/reload) builds the new Router beside the old one (``build_router``:
sha256 of the model files checked, canary message routed), then swaps it in; requests in flight finish on
the old one and /readyz stays 200. A load that fails leaves the old Router serving and says why. A reload
reads the key file again too, so keys are added, rotated or revoked without a restart; a key file that
does not load fails the reload, and the old keys and Router keep serving.

With several worker processes (router.serve.workers) the workers share a run directory. A worker that
reloads on an admin request writes the new paths there (``target.json``, with a generation number) and
sends SIGUSR1 to the supervisor, which sends SIGHUP to the other workers; a worker on SIGHUP loads the
paths of a newer generation, else its own paths again. A worker started later begins with them.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from router.decision_log import DecisionLog
from router.serve.auth import KeyStore
from router.serve.engine import Engine, build_router, close_verifier
from router.serve.prometheus import Metrics
from router.serve.promotion import PromotionError, check_compare_report
from router.serve.rundir import METRICS_DIR, RunDirTargets, Target
from router.serve.settings import ServeSettings, limit
from router.serve.turns import TurnMemory

log = logging.getLogger("intent_router.serve")


class ReloadError(Exception):
    """A reload that did not happen: the HTTP status, error code and one-line reason."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def one_line(e: BaseException) -> str:
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    return f"{type(e).__name__}: {'; '.join(lines)}"


def redaction_hook(spec: str) -> Callable[[str], str]:
    """The function named ``module:function``, for the decision log to apply to every message."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"decision log redaction hook {spec!r}: expected module:function")
    # a module in the working directory imports as `python -m` and uvicorn's --app-dir would import it
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"decision log redaction hook {spec!r}: {e}") from None
    finally:
        if added:
            sys.path.remove(cwd)
    if not callable(fn):
        raise ValueError(f"decision log redaction hook {spec!r} is not callable")
    return fn


def open_decision_log(settings: ServeSettings) -> DecisionLog | None:
    if settings.decision_log is None:
        return None
    redact = redaction_hook(settings.decision_log_redact) if settings.decision_log_redact else None
    return DecisionLog(settings.decision_log, settings.decision_log_format, redact=redact)


class State:
    def __init__(self, settings: ServeSettings, shared=None) -> None:
        self.settings = settings
        self.run_dir = Path(settings.run_dir) if settings.run_dir is not None else None
        self.metrics = Metrics(self.run_dir / METRICS_DIR if self.run_dir is not None else None)
        # the targets this process shares with the others serving beside it (RunDirTargets, or another
        # store with read/publish/others); None: it serves alone
        if shared is None and self.run_dir is not None:
            shared = RunDirTargets(self.run_dir, settings.workers - 1)
        self.shared = shared
        self.keys: KeyStore | None = KeyStore.load(settings.key_file) if settings.key_file else None
        self.decision_log = open_decision_log(settings)
        # the messages behind recent Decisions, for follow-ups that send only the Decision (logged)
        self.turns = TurnMemory() if self.decision_log is not None else None
        self.engine: Engine | None = None
        self.error: str | None = None  # why the start-up load failed
        self.target: Target | None = None  # what the serving Router was loaded from
        self._lock = threading.Lock()  # one load or reload at a time
        self._closed = False
        self.tracer = None  # router.tracing, with serve --otel
        self.tracer_provider = None

    # ------------------------------------------------------------------------------ reading
    @property
    def router(self):
        return self.engine.router if self.engine is not None else None

    @property
    def model_id(self) -> str | None:
        router = self.router
        return router.classifier.model_id if router is not None else None

    def limit(self, name: str) -> int:
        """A request limit (router.serve.settings.limit) under the serving router config."""
        router = self.router
        return limit(self.settings, name, router.config if router is not None else None)

    def breaker_state(self) -> str:
        breaker = getattr(getattr(self.router, "verifier", None), "breaker", None)
        return getattr(breaker, "state", "none") if breaker is not None else "none"

    # ------------------------------------------------------------------------------ loading
    def load(self) -> None:
        """Start-up: load the run directory's target if an admin reload wrote one, else the settings'."""
        with self._lock:
            if self._closed:
                return
            target = self._shared_target() or self._configured()
            self._install(build_router(self.settings, target.model, target.config), target)

    def reload(
        self,
        model: str | None = None,
        config: str | None = None,
        wait: bool = True,
        compare_report: str | None = None,
    ) -> dict:
        """Load ``model`` and ``config`` and swap them in; each defaults to the current one (with several
        workers: the newest any of them loaded); the other workers are told. A new model must pass
        ``compare_report`` (default: the settings' ``reload_compare``) when one is named. Raises
        ReloadError: 409 while another reload runs (unless ``wait``), 422 when the new Router does not
        load or is not admitted (the old one keeps serving)."""
        model = str(Path(model).resolve()) if model else None
        config = str(Path(config).resolve()) if config else None
        report = str(Path(compare_report).resolve()) if compare_report else None

        def chosen(current: Target) -> Target:
            return replace(
                current, model=model or current.model, config=config or current.config, compare=report
            )

        result = self._reload(chosen, wait, "admin request", share=self.shared is not None)
        if self.shared is not None:
            result["other_workers"] = self.shared.others
        return result

    def reload_on_signal(self) -> None:
        """SIGHUP: load the current paths again (files replaced in place), or the run directory's newer
        ones; a failure is logged and the old Router keeps serving."""
        try:
            self._reload(self._on_signal, True, "SIGHUP")
        except ReloadError as e:  # a failed load was logged in _reload
            if e.code != "reload_failed":
                log.warning("SIGHUP: no reload: %s", e.message)

    def _reload(self, chosen: Callable[[Target], Target], wait: bool, why: str, share: bool = False) -> dict:
        """Under the lock: load ``chosen(current target)``, swap it in, and (``share``) record it for the
        other workers."""
        if not self._lock.acquire(blocking=wait):
            raise ReloadError(409, "reload_in_progress", "another reload is running; try again when it ends")
        try:
            if self._closed:
                raise ReloadError(503, "shutting_down", "the server is shutting down")
            target = chosen(self._newest())
            old = self.model_id
            t0 = time.perf_counter()
            log.info("reloading (%s): model %s, config %s", why, target.model, target.config or "packaged")
            try:
                keys = KeyStore.load(self.settings.key_file) if self.settings.key_file else None
                router = build_router(self.settings, target.model, target.config, serving=self.router)
                self._admit(router, target, old)
            except Exception as e:
                reason = one_line(e)
                self.metrics.reloads.labels(outcome="failed", model=self.metrics.model).inc()
                log.error("reload failed (%s), still serving %s: %s", why, old or "no model", reason)
                serving = f"still serving {old}" if old else "no model is serving"
                raise ReloadError(
                    422, "reload_failed", f"nothing was reloaded, {serving}: {reason}"
                ) from None
            self.keys = keys  # one reference assignment: a request authenticates on the old or the new
            self._install(router, target)
            if share:
                self._share(target)
            seconds = round(time.perf_counter() - t0, 3)
            self.metrics.reloads.labels(outcome="ok", model=self.metrics.model).inc()
            log.info("reloaded in %.2f s (%s): %s -> %s", seconds, why, old, self.model_id)
            return {
                "status": "reloaded",
                "model_id": self.model_id,
                "previous_model_id": old,
                "model": target.model,
                "config": target.config,
                "seconds": seconds,
                "pid": os.getpid(),
            }
        finally:
            self._lock.release()

    def _on_signal(self, current: Target) -> Target:
        """What SIGHUP loads: the run directory's newer target (another worker's admin reload), with the
        report that admitted it, else the paths serving now, read again, with the settings' report."""
        return current if current.generation > self.generation else replace(current, compare=None)

    def _admit(self, router, target: Target, serving: str | None) -> None:
        """Refuse (PromotionError) a new model without a passed compare report against the serving one,
        when a report is named; the refused Router's verifier is closed."""
        report = target.compare or self.settings.reload_compare
        new = router.classifier.model_id
        if report is None or serving is None or new == serving:
            return
        try:
            check_compare_report(report, serving, new)
        except PromotionError:
            close_verifier(router.verifier)
            raise
        log.info("compare report %s admits %s in place of %s", report, new, serving)

    def _install(self, router, target: Target) -> None:
        router.decision_log = self.decision_log  # attached now: the canary was not recorded
        if self.engine is None:
            self.engine, old = Engine(router, self.settings), None
        else:
            old = self.engine.swap(router)
        self.target, self.error = target, None
        self.metrics.set_model(router.classifier.model_id)
        self.metrics.ready.set(1)
        if self.keys is not None:
            for kid, missing in self.keys.roles_unknown_to(set(router.config.roles)).items():
                log.warning("key %s grants role(s) %s that the router config does not define", kid, missing)
        if old is not None and old.verifier is not None:  # close it once its last request is answered
            threading.Thread(target=self._retire, args=(old,), daemon=True).start()

    def _retire(self, old) -> None:
        if not self.engine.drain(old, self.settings.graceful_timeout):
            log.warning("requests still on the previous model after %.0f s", self.settings.graceful_timeout)
        close_verifier(old.verifier)

    def close(self) -> None:
        """Shutdown: finish the routing threads, then close the decision log and the verifier."""
        with self._lock:  # a reload in progress ends first
            self._closed = True
            router = self.router
            if self.engine is not None:
                self.engine.close()
            if self.decision_log is not None:
                self.decision_log.close()
            if router is not None:
                close_verifier(router.verifier)
            if self.tracer_provider is not None:
                self.tracer_provider.shutdown()  # the spans not yet exported are sent

    def _configured(self) -> Target:
        from router.shipped import default_model_dir

        s = self.settings
        model = s.model_dir if s.model_dir is not None else default_model_dir()
        return Target(str(Path(model).resolve()), str(Path(s.config).resolve()) if s.config else None)

    # ------------------------------------------------------------- the targets shared with the others
    @property
    def generation(self) -> int:
        """The generation of the target serving here (0: the configured one)."""
        return self.target.generation if self.target is not None else 0

    def _newest(self) -> Target:
        """This process's target, or the shared one when an admin reload in another published a newer one."""
        own = self.target or self._configured()
        shared = self._shared_target()
        return shared if shared is not None and shared.generation > own.generation else own

    def _shared_target(self) -> Target | None:
        return self.shared.read() if self.shared is not None else None

    def _share(self, target: Target) -> None:
        """Publish ``target`` as the newest, for the others to load."""
        self.target = self.shared.publish(target)
