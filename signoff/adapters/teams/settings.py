"""The ``[teams]`` config section: approval cards in a Microsoft Teams conversation.

Imported with the config file, so it imports nothing of the Teams surface, which
is built from it by `signoff.adapters.teams.PLUGIN`. The two URLs default to Microsoft's
public cloud; a sovereign cloud (or the tests' fake) sets its own.
"""

from __future__ import annotations

from typing import Self

from pydantic import field_validator, model_validator

from signoff.sections import NonEmpty, Section, problem

__all__ = ["PUBLIC_OPENID_METADATA", "PUBLIC_SERVICE_URL", "TeamsSettings"]

# Bot Framework's published metadata for tokens the channels send to bots.
PUBLIC_OPENID_METADATA = "https://login.botframework.com/v1/.well-known/openidconfiguration"
# The Teams connector of the public cloud; an incoming activity names the one to use.
PUBLIC_SERVICE_URL = "https://smba.trafficmanager.net/teams/"
_TOKEN_URL = "https://login.microsoftonline.com/{tenant}/oauth2/v2.0/token"


class TeamsSettings(Section):
    """[teams]: approval cards (Adaptive Cards) in one Teams conversation."""

    app_id: NonEmpty  # the bot's Microsoft App ID (the JWT audience)
    app_password: NonEmpty  # its client secret
    tenant_id: NonEmpty
    conversation_id: NonEmpty  # where cards go, e.g. "19:abc…@thread.tacv2"
    service_url: str = PUBLIC_SERVICE_URL
    openid_metadata_url: str = PUBLIC_OPENID_METADATA
    token_url: str | None = None  # default: the tenant's Entra ID token endpoint

    @field_validator("service_url", "openid_metadata_url", "token_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("https://", "http://")):
            raise ValueError("must be an http(s) URL")
        return value

    @model_validator(mode="after")
    def _plain_http_only_locally(self) -> Self:
        # Tokens and the app password travel on these: plain http only to this machine.
        for key in ("service_url", "openid_metadata_url", "token_url"):
            value = getattr(self, key)
            if value and value.startswith("http://") and not _local(value):
                raise problem(key, "must use https (plain http only for 127.0.0.1/localhost)")
        return self

    @property
    def token_endpoint(self) -> str:
        """Where the bot's tokens come from (client credentials)."""
        return self.token_url or _TOKEN_URL.format(tenant=self.tenant_id)


def _local(url: str) -> bool:
    host = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[0]
    return host in ("127.0.0.1", "localhost", "[::1]")
