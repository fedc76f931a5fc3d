"""The challenger gate: a candidate model against the incumbent on the same messages (compare.json,
compare.md) and the `compare` command."""
