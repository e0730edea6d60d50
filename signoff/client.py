"""The Python SDK: ``from signoff.client import Signoff, SignoffSync, NotApproved``.

The source lives in one place, the small ``signoff-client`` distribution
(``clients/signoff-client/``, package ``signoff_client``), which needs nothing but httpx
so that it installs into other tools' environments (Hermes Agent's) on its own. This
package depends on it and re-exports it here, so both import paths give the same classes.
"""

from __future__ import annotations

from signoff_client.sdk import DEFAULT_URL, Decision, NotApproved, Signoff, SignoffSync

__all__ = ["DEFAULT_URL", "Decision", "NotApproved", "Signoff", "SignoffSync"]
