"""Empirical privacy audit of the shipped mechanisms (issue 11)."""
