"""signoff's client: ask a signoff daemon before an agent acts.

``from signoff_client import Signoff, SignoffSync, NotApproved, Decision`` (the full
``signoff`` package re-exports the same objects as ``signoff.client``). The Hermes Agent
plugin is `signoff_client.hermes`.
"""

from __future__ import annotations

from signoff_client.sdk import DEFAULT_URL, Decision, NotApproved, Signoff, SignoffSync

__version__ = "0.1.0"
__all__ = ["DEFAULT_URL", "Decision", "NotApproved", "Signoff", "SignoffSync", "__version__"]
