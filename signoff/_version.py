"""The version of signoff, on the ground floor: anything may import it without the package root."""

__version__ = "0.3.0.dev0"
