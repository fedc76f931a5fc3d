"""Reports: eval.json (and its schema), report.md and its plots for people, the console summary, and the
CI gate that compares a report with a committed baseline."""
