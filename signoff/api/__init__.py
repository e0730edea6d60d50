"""The HTTP API and web console app."""
