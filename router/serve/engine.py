"""The Engine: runs Router.route_batch in a thread pool, off the event loop, and swaps the Router.

A request takes the current Router once (``acquire``) and routes on it to the end, so a reload that
swaps in another Router (``swap``: one reference assignment under the lock) never changes the model
under a request in flight; ``drain`` waits for the requests still on the old one.

Micro-batching concurrent requests into one route_batch call was measured and dropped: on 2 cores it
lowered throughput and raised latency under load (docs/serve.md).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from router.decision import Decision
from router.serve.golden import check_golden, golden_for
from router.serve.settings import ServeSettings

CANARY = "restart the indexing service"


class Engine:
    def __init__(self, router, settings: ServeSettings) -> None:
        self._cond = threading.Condition()
        self._router = router
        self._busy: Counter[int] = Counter()  # id(router) -> requests routing on it now
        self.settings = settings
        self.pool = self._pool_for(router)

    def _pool_for(self, router) -> ThreadPoolExecutor:
        """Threads for ``router``: many with a verifier (its calls wait on HTTP), else one per core."""
        s = self.settings
        threads = s.verifier_threads if router.verifier is not None else s.inference_threads
        return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="route")

    @property
    def router(self):
        """The Router new requests get."""
        return self._router

    def acquire(self):
        """The current Router, held until ``release``: a reload waits for it before closing it."""
        with self._cond:
            router = self._router
            self._busy[id(router)] += 1
            return router

    def release(self, router) -> None:
        with self._cond:
            self._busy[id(router)] -= 1
            if self._busy[id(router)] <= 0:
                del self._busy[id(router)]
                self._cond.notify_all()

    def swap(self, router):
        """Serve ``router`` from now on; returns the one it replaces."""
        with self._cond:
            old, self._router = self._router, router
            if (old.verifier is None) != (router.verifier is None):  # a verifier added or removed
                pool, self.pool = self.pool, self._pool_for(router)
                pool.shutdown(wait=False)  # what it holds still runs
        return old

    def drain(self, router, timeout: float) -> bool:
        """Wait until no request routes on ``router``; False if some still do after ``timeout`` s."""
        with self._cond:
            return self._cond.wait_for(lambda: id(router) not in self._busy, timeout)

    async def route(
        self,
        router,
        texts: list[str],
        role: str,
        previous: Decision | None = None,
        context: str | None = None,
        log_fields: Mapping[str, str | None] | None = None,
    ) -> list[Decision]:
        """``router.route_batch`` in the pool, each message read after the previous turn when one is given
        (``context``, the previous message, is what the decision log records as previous_message, with
        ``log_fields``). Releases ``router`` (from ``acquire``) when the work ends, even if the caller
        stopped waiting."""
        work = functools.partial(
            router.route_batch, texts, role, previous=previous, context=context, log_fields=log_fields
        )
        future = self.pool.submit(work)
        future.add_done_callback(lambda _: self.release(router))
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def build_router(settings: ServeSettings, model_dir: str | Path, config: str | Path | None, serving=None):
    """A Router for ``model_dir`` and ``config`` with the server's threshold and verifier, after it has
    classified the canary message and passed the golden set (router.serve.golden; against ``serving``,
    the Router it would replace, too). ``Router.load`` checks the sha256 of every model file it reads
    (graph, tokenizer, head, reference embeddings) against the manifest, so an altered file fails here.
    The Router has no decision log yet: the caller attaches it, so neither check is recorded."""
    from router.config import RouterConfig
    from router.routing import Router
    from router.verifier.factory import build_verifier

    cfg = RouterConfig.load(config)
    verifier = build_verifier(settings.verifier_url, settings.verifier_model, settings.verifier_timeout, cfg)
    try:
        router = Router.load(
            model_dir,
            config=cfg,
            verifier=verifier,
            threshold=settings.threshold,
            intra_op_threads=settings.ort_threads,
            tools=settings.tools,
        )
        role = next(iter(cfg.roles))
        d = router.route_batch([CANARY], role)[0]
        if d.source == "guardrail" or d.confidence is None:
            raise RuntimeError(f"canary message was not classified: {d.source}/{d.reason_code.value}")
        golden = golden_for(settings.golden, router.classifier.labels)
        if golden is not None:
            s = settings
            check_golden(router, golden, s.golden_min_accuracy, serving, s.golden_min_agreement)
    except BaseException:
        close_verifier(verifier)
        raise
    return router


def close_verifier(verifier) -> None:
    """Close a Router's verifier (its HTTP client), if it has one."""
    if verifier is not None and hasattr(verifier, "close"):
        verifier.close()
