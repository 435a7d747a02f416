"""Searching: the driver loop, its rounds and results, and the runner over problem sets."""
