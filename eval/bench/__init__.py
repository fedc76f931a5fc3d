"""Benchmarks that time or load the runtime: route() speed against a reference, the HTTP service under
load, log scoring's throughput, messages in other languages, and the CPU they ran on."""
