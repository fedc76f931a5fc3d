"""Public benchmarks and probes: CLINC150 and BANKING77 runs, the out-of-scope check, intents defined by
examples against trained classes, a project nobody here wrote, and encoder probes. Benchmark commands
read the public data; tests and the shipped model's training never do."""
