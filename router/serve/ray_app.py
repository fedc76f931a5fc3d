"""The HTTP service on Ray Serve: the same API as ``intent-router serve`` (router.serve.app.create_app), as
replicas across a Ray cluster, with autoscaling on load (extra ``ray-serve``).

``intent-router serve --ray`` deploys ``application(settings, ...)`` to the Ray cluster at ``--ray-address``
(or a local one it starts) and serves until SIGTERM/SIGINT. Each replica is a process of its own, as a
worker of ``serve --workers N`` is: it builds the app from the same settings (the same key file, limits,
golden set and compare report, decision log with a file per process) and loads its own Router before it
takes requests. Ray's HTTP proxy on each node spreads requests over the replicas.

Reloads reach every replica. A replica's ``POST /admin/reload`` publishes its new target in a named Ray
actor (``TargetActor``, one per application), as a worker writes the run directory's ``target.json``
(router.serve.rundir); every replica polls the actor each ``POLL`` seconds and loads a newer target with
the same checks (sha256, canary, golden set, compare report). SIGHUP to the ``serve --ray`` process has
every replica read its paths again. The key file, model, config and decision log paths must be readable
at the same paths on every node.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

from router.serve.rundir import Target
from router.serve.settings import ServeSettings

log = logging.getLogger("intent_router.serve")
APP_NAME = "intent-router"
TARGETS_ACTOR = "intent-router-targets"
POLL = 1.0  # seconds between a replica's looks at the shared target


class TargetActor:
    """The replicas' shared target (a Ray actor): the newest published, one generation above the last;
    ``signal`` raises the generation of a reload of the same paths (SIGHUP)."""

    def __init__(self) -> None:
        self.target: dict | None = None
        self.generation = 0

    def read(self) -> dict | None:
        return self.target

    def publish(self, target: dict) -> dict:
        self.generation = max(self.generation, target["generation"]) + 1
        self.target = {**target, "generation": self.generation}
        return self.target

    def signal(self) -> int:
        self.generation += 1
        if self.target is not None:
            self.target = {**self.target, "generation": self.generation, "compare": None}
        else:
            self.target = {"model": None, "config": None, "generation": self.generation, "compare": None}
        return self.generation


class RayTargets:
    """``State.shared`` for a replica: the TargetActor's target."""

    def __init__(self, actor, others: int) -> None:
        self.actor, self.others = actor, others

    def read(self) -> Target | None:
        import ray

        t = ray.get(self.actor.read.remote())
        return None if t is None or t["model"] is None else Target(**t)

    def publish(self, target: Target) -> Target:
        import ray

        return Target(**ray.get(self.actor.publish.remote(dataclasses.asdict(target))))

    def signalled(self) -> int:
        import ray

        t = ray.get(self.actor.read.remote())
        return 0 if t is None else t["generation"]


def _follow(state, targets: RayTargets) -> None:
    """A replica's poller: load the shared target when it is newer than the one serving here."""
    while True:
        time.sleep(POLL)
        try:
            newest = targets.signalled()  # read once: a generation published during the reload is next
            if state.router is not None and newest > state.generation:
                state.reload_on_signal()
                state.target = dataclasses.replace(state.target, generation=newest)
        except Exception as e:  # a failed reload was logged; keep following
            log.warning("replica target poll: %s", e)


def application(settings: ServeSettings, replicas: int = 2, max_replicas: int | None = None):
    """The bound Ray Serve application: ``replicas`` replicas of the service, or with ``max_replicas``,
    from ``replicas`` up to that many as requests queue (Ray Serve's autoscaling)."""
    import ray
    from ray import serve

    fields = dataclasses.asdict(dataclasses.replace(settings, workers=1, load_before_serving=True))
    actor = (
        ray.remote(TargetActor)
        .options(name=TARGETS_ACTOR, get_if_exists=True, lifetime="detached", num_cpus=0)
        .remote()
    )
    others = (max_replicas or replicas) - 1

    def build():
        from router.serve.app import create_app

        app = create_app(ServeSettings(**fields), shared=RayTargets(actor, others))
        state = app.state.router_state
        threading.Thread(target=_follow, args=(state, RayTargets(actor, others)), daemon=True).start()
        return app

    @serve.ingress(build)
    class IntentRouter:
        pass

    if max_replicas is not None:
        scaling = {
            "autoscaling_config": {
                "min_replicas": replicas,
                "max_replicas": max_replicas,
                "target_ongoing_requests": 8,
            }
        }
    else:
        scaling = {"num_replicas": replicas}
    options = {"num_cpus": 0.5}  # a replica is mostly idle between messages; Ray needs not hold a core
    deployment = serve.deployment(IntentRouter, name=APP_NAME, ray_actor_options=options, **scaling)
    return deployment.bind()


def check_ray(workers: int, max_replicas: int | None, replicas: int) -> None:
    """The options of ``serve --ray`` that cannot go together, and the extra it needs."""
    if workers != 1:
        raise ValueError("--ray serves replicas, not worker processes: give --replicas N, not --workers")
    if max_replicas is not None and max_replicas < replicas:
        raise ValueError(f"--max-replicas {max_replicas} is below --replicas {replicas}")
    try:
        import ray.serve  # noqa: F401
    except ImportError as e:
        raise ValueError(
            f"--ray needs the 'ray-serve' extra: pip install 'intent-router[ray-serve]' ({e})"
        ) from None


def run_on_ray(settings: ServeSettings, replicas: int, max_replicas: int | None, address: str | None) -> int:
    """Deploy to the Ray cluster at ``address`` (None: a local one, started here), serve on the settings'
    host and port until SIGTERM/SIGINT, then take the application down. SIGHUP: every replica reloads."""
    import signal

    import ray
    from ray import serve

    ray.init(address=address, namespace=APP_NAME, ignore_reinit_error=True, log_to_driver=False)
    serve.start(http_options={"host": settings.host, "port": settings.port})
    serve.run(application(settings, replicas, max_replicas), name=APP_NAME, route_prefix="/")
    log.info(
        "serving on http://%s:%d: %s replicas on Ray at %s",
        settings.host,
        settings.port,
        f"{replicas}-{max_replicas}" if max_replicas else replicas,
        ray.get_runtime_context().gcs_address,
    )
    got: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda sig, frame: got.append(sig))
    actor = ray.get_actor(TARGETS_ACTOR)
    while True:
        time.sleep(0.2)
        while got:
            sig = got.pop(0)
            if sig == signal.SIGHUP:
                log.info("SIGHUP: every replica reloads (generation %d)", ray.get(actor.signal.remote()))
                continue
            serve.delete(APP_NAME)
            ray.kill(actor)
            return 0
