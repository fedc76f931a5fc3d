"""Throughput of `intent-router score`: ``intent-router bench score --rows 20000 [--ray-workers 2]``.

Writes N synthetic rows (corpus messages with a random suffix, so no two are identical), scores them
locally (one process) and with ``--ray`` on a local Ray with ``--ray-workers`` actors, and reports
messages per second for each, with the load average before and after (the machine may be shared).
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from pathlib import Path

WORDS = [
    "please",
    "today",
    "asap",
    "again",
    "now",
    "quickly",
    "thanks",
    "team",
    "project",
    "budget",
    "the",
    "for",
    "with",
]


def synthetic(path: Path, rows: int, data: Path, seed: int = 0) -> Path:
    """``rows`` messages drawn from the train, dev and test splits of the corpus folder ``data``."""
    base = []
    for name in ("train", "dev", "test"):
        for line in (data / f"{name}.jsonl").read_text().splitlines():
            if line.strip():
                base.append(json.loads(line))
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(rows):
            r = base[rng.randrange(len(base))]
            text = r["text"] + " " + " ".join(rng.choices(WORDS, k=rng.randrange(0, 4)))
            f.write(json.dumps({"id": f"s{i}", "text": text.strip(), "label": r["label"]}) + "\n")
    return path


def run_bench_score(
    rows: int = 20_000,
    ray_workers: int = 2,
    skip_local: bool = False,
    window_rows: int = 10_000,
    data: Path = Path("data"),
) -> dict:
    """Score ``rows`` synthetic rows locally, then on a local Ray with ``ray_workers`` actors (0: no Ray
    run); messages per second, wall time and accuracy of each."""
    from eval.metrics.scored_logs import decisions_metrics
    from router.score.options import ScoreOptions, model_labels
    from router.score.run import score_file

    tmp = Path(tempfile.mkdtemp(prefix="bench-score-"))
    inp = synthetic(tmp / "in.jsonl", rows, data)
    opts = ScoreOptions(id_column="id", with_labels=True)
    labels = model_labels(opts.model_dir)
    out: dict = {"rows": rows}
    if not skip_local:
        la = os.getloadavg()
        t0 = time.perf_counter()
        s = score_file(inp, tmp / "local.parquet", opts, progress=False)
        out["local"] = {
            "messages_per_s": s["messages_per_s"],
            "wall_s": round(time.perf_counter() - t0, 1),
            "accuracy": decisions_metrics(tmp / "local.parquet", labels)["accuracy"],
            "load_avg_before": la,
            "load_avg_after": os.getloadavg(),
        }
        print(json.dumps(out["local"]), flush=True)
    if ray_workers:
        from router.score.ray_data import score_file_ray

        la = os.getloadavg()
        t0 = time.perf_counter()
        s = score_file_ray(
            inp, tmp / "ray.parquet", opts, workers=ray_workers, window_rows=window_rows, progress=False
        )
        out["ray"] = {
            "workers": ray_workers,
            "messages_per_s": s["messages_per_s"],
            "wall_s_including_ray_start": round(time.perf_counter() - t0, 1),
            "accuracy": decisions_metrics(tmp / "ray.parquet", labels)["accuracy"],
            "load_avg_before": la,
            "load_avg_after": os.getloadavg(),
        }
    return out
