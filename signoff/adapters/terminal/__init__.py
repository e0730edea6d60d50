"""The terminal approval surface used by `signoff handle`."""
