"""Fakes at the wire for tests: servers that speak the real protocols."""
