"""The run directory that the worker processes of one server share (``serve --workers N``).

The supervisor creates it (a temporary directory, removed at exit) and holds in it:

- ``metrics/``: prometheus_client's multiprocess files (``PROMETHEUS_MULTIPROC_DIR``);
- ``target.json``: the model and config the workers should serve, written by the worker that performed an
  admin reload (``origin``), with a generation number that each such reload raises.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

TARGET = "target.json"
METRICS_DIR = "metrics"


@dataclass(frozen=True)
class Target:
    """What a Router is loaded from: a model directory and a router config (None: the packaged one)."""

    model: str
    config: str | None = None
    generation: int = 0  # raised by every admin reload; orders the run directory's targets
    compare: str | None = None  # the compare report that admitted the model (router.serve.promotion)


def read_target(run_dir: Path) -> Target | None:
    try:
        data = json.loads((run_dir / TARGET).read_text())
    except FileNotFoundError:
        return None
    return Target(data["model"], data["config"], data["generation"], data.get("compare"))


def write_target(run_dir: Path, target: Target) -> Target:
    """Record ``target`` as the newest, one generation above any recorded; returns it as recorded."""
    with open(run_dir / "target.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        recorded = read_target(run_dir)
        generation = max(target.generation, recorded.generation if recorded else 0) + 1
        newest = Target(target.model, target.config, generation, target.compare)
        path = run_dir / TARGET
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**asdict(newest), "origin": os.getpid()}))
        os.replace(tmp, path)  # readers see the old file or the new one, never half of one
    return newest


def target_origin(run_dir: Path) -> int | None:
    """The worker that wrote the recorded target (it has loaded it already), if any."""
    with contextlib.suppress(FileNotFoundError, KeyError, ValueError):
        return int(json.loads((run_dir / TARGET).read_text())["origin"])
    return None


class RunDirTargets:
    """The targets the workers of one supervisor share (``State.shared``): the run directory's
    ``target.json``; a worker that publishes one has the supervisor send SIGHUP to the others. Another
    store (router.serve.ray_app's, for Ray Serve replicas) has the same three members."""

    def __init__(self, run_dir: Path, others: int) -> None:
        self.run_dir, self.others = Path(run_dir), others

    def read(self) -> Target | None:
        return read_target(self.run_dir)

    def publish(self, target: Target) -> Target:
        recorded = write_target(self.run_dir, target)
        os.kill(os.getppid(), signal.SIGUSR1)
        return recorded
