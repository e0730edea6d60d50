"""The grant key's direct JSON spelling is exactly `canonical_json` of its four fields, so
keys of grants stored before it (and by other versions) still match."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from signoff.runtime.canonical import canonical_json, sha256_hex
from signoff.runtime.models import Action, RiskClass
from signoff.runtime.policy.grants import grant_key, rule_for

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)  # quotes, controls, …


def _reference(policy_id: str, action: Action) -> str:
    """The key as written before the direct spelling (canonical_json of a dict)."""
    digest = sha256_hex(canonical_json({
        "tool": action.tool, "capability": action.capability,
        "rule": rule_for(action), "fingerprint": action.fingerprint}))
    return f"signoff:{policy_id}:{digest}"


@settings(max_examples=300, deadline=None)
@given(policy_id=TEXT, tool=TEXT, capability=st.none() | TEXT, fingerprint=st.none() | TEXT,
       risk=st.none() | st.sampled_from(RiskClass))
def test_grant_key_equals_the_canonical_json_spelling(policy_id: str, tool: str,
                                                      capability: str | None,
                                                      fingerprint: str | None,
                                                      risk: RiskClass | None) -> None:
    """Any tool, capability and fingerprint text (or None) gives the key canonical_json gives."""
    action = Action(tool=tool, capability=capability, fingerprint=fingerprint, risk=risk)
    assert grant_key(policy_id, action) == _reference(policy_id, action)


def test_grant_key_of_non_ascii_and_escaped_text() -> None:
    """Non-ASCII stays UTF-8 and quotes, backslashes and controls are escaped as json does."""
    action = Action(tool='send "é"\\\n\x00', capability="cap\u2028é", fingerprint="ф\t",
                    risk=RiskClass.SEND)
    assert grant_key("p", action) == _reference("p", action)
