"""The review queue: which logged decisions are worth a person's time to label, the files it reads and
writes (JSONL, CSV, Label Studio tasks), the clustering that spreads its picks, and `review`."""
