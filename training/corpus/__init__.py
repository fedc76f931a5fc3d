"""The labelled corpus: reading and checking its files (data check), the compound rows, the label set,
the checks a build runs before it trains, and merging reviewed rows into a training file (data add)."""
