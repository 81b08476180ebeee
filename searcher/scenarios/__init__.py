"""Scenario files: worked examples with expected numbers, run as golden checks."""
