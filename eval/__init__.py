"""Evaluation: metrics, calibration, threshold behaviour, latency, reports and CI gates."""
