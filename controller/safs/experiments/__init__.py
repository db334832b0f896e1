"""Experiments tier: scenarios, workloads, the policy registry, run backends (simulator,
Mininet), metrics and the evaluation harness. Imports every tier below it, never ``safs.apps``."""
