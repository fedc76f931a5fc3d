"""Scoring a message log (`intent-router score`): route every row of a JSONL / CSV / TSV / Parquet file
and write the decisions, resumably, in this process or on Ray Data.

- ``router.score.options``: ScoreOptions, ScoreError, the model's labels (no third-party imports);
- ``router.score.reader``: the input, streamed;
- ``router.score.output``: the output columns, part files and the merge;
- ``router.score.run``: ``score_file``, the resumable run (one Router in this process by default);
- ``router.score.ray_data``: ``score_file_ray``, the same run with the routing on Ray Data.

Reading and writing need pyarrow, ``--ray`` needs Ray (extra ``scale``): ``import router.score`` imports
neither, so the runtime install stays without them.
"""

from router.score.options import ScoreError, ScoreOptions

__all__ = ["ScoreError", "ScoreOptions", "score_file", "score_file_ray"]


def __getattr__(name):
    if name == "score_file":
        from router.score.run import score_file

        return score_file
    if name == "score_file_ray":
        from router.score.ray_data import score_file_ray

        return score_file_ray
    raise AttributeError(name)
