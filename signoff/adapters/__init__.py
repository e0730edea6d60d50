"""One sub-package per approval surface."""
