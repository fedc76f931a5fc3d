"""Throughput of `intent-router score`: ``python -m eval.bench_score --rows 20000 [--ray-workers 2]``.

Writes N synthetic rows (corpus messages with a random suffix, so no two are identical), scores them
locally (one process) and with ``--ray`` on a local Ray with ``--ray-workers`` actors, and prints
messages per second for each, with the load average before and after (this machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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


def synthetic(path: Path, rows: int, seed: int = 0) -> Path:
    base = []
    for name in ("train", "dev", "test"):
        for line in (ROOT / "data" / f"{name}.jsonl").read_text().splitlines():
            if line.strip():
                base.append(json.loads(line))
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(rows):
            r = base[rng.randrange(len(base))]
            text = r["text"] + " " + " ".join(rng.choices(WORDS, k=rng.randrange(0, 4)))
            f.write(json.dumps({"id": f"s{i}", "text": text.strip(), "label": r["label"]}) + "\n")
    return path


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--ray-workers", type=int, default=2, help="0: skip the Ray run")
    p.add_argument("--skip-local", action="store_true")
    p.add_argument("--window-rows", type=int, default=10_000)
    a = p.parse_args(argv)
    from eval.score import score_file
    from eval.score_io import ScoreOptions

    tmp = Path(tempfile.mkdtemp(prefix="bench-score-"))
    inp = synthetic(tmp / "in.jsonl", a.rows)
    opts = ScoreOptions(id_column="id", with_labels=True)
    out: dict = {"rows": a.rows}
    if not a.skip_local:
        la = os.getloadavg()
        t0 = time.perf_counter()
        s = score_file(inp, tmp / "local.parquet", opts, progress=False)
        out["local"] = {
            "messages_per_s": s["messages_per_s"],
            "wall_s": round(time.perf_counter() - t0, 1),
            "accuracy": s["metrics"]["accuracy"],
            "load_avg_before": la,
            "load_avg_after": os.getloadavg(),
        }
        print(json.dumps(out["local"]), flush=True)
    if a.ray_workers:
        from eval.score_ray import score_file_ray

        la = os.getloadavg()
        t0 = time.perf_counter()
        s = score_file_ray(
            inp, tmp / "ray.parquet", opts, workers=a.ray_workers, window_rows=a.window_rows, progress=False
        )
        out["ray"] = {
            "workers": a.ray_workers,
            "messages_per_s": s["messages_per_s"],
            "wall_s_including_ray_start": round(time.perf_counter() - t0, 1),
            "accuracy": s["metrics"]["accuracy"],
            "load_avg_before": la,
            "load_avg_after": os.getloadavg(),
        }
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
