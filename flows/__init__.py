"""Prefect flows: each only sequences tasks."""
