"""The HTTP API and web console app (`signoff.api.app.create_app`).

Nothing is imported here: `signoff.api.context` (which the config checks use) must not
pull in FastAPI for every command.
"""
