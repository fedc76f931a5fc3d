"""What evaluation measures, all through the router's own decisions where routing is involved
(eval.metrics.routed): classification, calibration, thresholds, out of scope, two-intent requests,
conversations, latency and verifier lift; the evaluator assembles them into one report."""
