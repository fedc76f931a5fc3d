"""`intent-router score --ray`: the same scoring on Ray Data (extra ``scale``).

The driver streams the input in windows (as the local mode does), and each window becomes a Ray
Dataset whose ``map_batches`` runs over an actor pool: each actor loads one Router (0.1 s) and routes
batches with ``route_batch``. Output comes back to the driver, which writes the same atomic part files
as the local mode, so resume semantics are identical: a crash loses at most the window in flight,
which is scored again. Without an address a local Ray is started with ``workers`` CPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa

from router.score.options import ScoreOptions
from router.score.output import output_schema
from router.score.run import decisions_table, score_file


class RouterActor:
    """One Router per actor, loaded once; called with pyarrow batches."""

    def __init__(self, opts: ScoreOptions, ort_threads: int) -> None:
        from router.routing import Router

        self.opts = opts
        self.router = Router.load(
            opts.model_dir, config=opts.config, threshold=opts.threshold, intra_op_threads=ort_threads
        )

    def __call__(self, batch: pa.Table) -> pa.Table:
        cols = {name: batch.column(name).to_pylist() for name in batch.column_names}
        return decisions_table(cols, self.router, self.opts)


class RayRunner:
    def __init__(
        self,
        opts: ScoreOptions,
        address: str | None = None,
        workers: int = 2,
        batch_size: int = 256,
        ort_threads: int = 1,
    ) -> None:
        import ray

        self.opts, self.workers, self.batch_size, self.ort_threads = opts, workers, batch_size, ort_threads
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        self._ray = ray

    def __call__(self, batches: Iterator[dict], emit: Callable[[pa.Table], None]) -> None:
        ray = self._ray
        in_schema = None
        for b in batches:
            t = pa.table(b)
            in_schema = in_schema or _input_schema(t)
            t = t.cast(in_schema)
            # several blocks per window so every actor gets work (no repartition: its tasks would need
            # CPUs that the actors hold, and a local Ray with num_cpus=workers would wait forever)
            n_blocks = max(1, min(self.workers * 4, t.num_rows // self.batch_size or 1))
            step = -(-t.num_rows // n_blocks)
            ds = ray.data.from_arrow([t.slice(i, step) for i in range(0, t.num_rows, step)])
            out = ds.map_batches(
                RouterActor,
                fn_constructor_args=(self.opts, self.ort_threads),
                batch_size=self.batch_size,
                batch_format="pyarrow",
                compute=ray.data.ActorPoolStrategy(size=self.workers),
                num_cpus=1,
            )
            tables = [tb for tb in out.iter_batches(batch_format="pyarrow", batch_size=None)]
            result = pa.concat_tables([tb.cast(output_schema(self.opts)) for tb in tables])
            emit(result.sort_by("row"))  # Ray Data does not keep order by default; parts must be in row order

    def shutdown(self) -> None:
        self._ray.shutdown()


def _input_schema(t: pa.Table) -> pa.Schema:
    fields = []
    for f in t.schema:
        typ = pa.int64() if f.name == "row" else pa.string()
        fields.append(pa.field(f.name, typ))
    return pa.schema(fields)


def score_file_ray(
    inp: str | Path,
    out: str | Path,
    opts: ScoreOptions | None = None,
    *,
    address: str | None = None,
    workers: int = 2,
    window_rows: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
    max_rows: int | None = None,
) -> dict:
    opts = opts or ScoreOptions()
    # big enough that each window's barrier (slowest block, actor start) stays a small share of its time
    window_rows = window_rows or max(50_000, 5_000 * workers)
    runner = RayRunner(opts, address=address, workers=workers)
    try:
        summary = score_file(
            inp,
            out,
            opts,
            overwrite=overwrite,
            progress=progress,
            runner=runner,
            window_rows=window_rows,
            max_rows=max_rows,
        )
    finally:
        if not address:
            runner.shutdown()
    summary["ray"] = {"address": address or "local", "workers": workers, "window_rows": window_rows}
    return summary
