"""The one data loader: labelled and unlabelled messages from JSONL, CSV, TSV, Parquet or a Hub dataset,
and the sources they are read from. Training reads its files through it too."""
