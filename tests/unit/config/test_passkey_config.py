"""`config check` on passkey step-up: refused where browsers could never use a passkey
(plain http off localhost, an IP address as relying party), and a warning when no risk
class is stepped up (the setting would ask for nothing)."""

from __future__ import annotations

from pathlib import Path

from signoff.config import preflight
from signoff.config.settings import load_settings
from signoff.runtime.tools.registry import builtin_registry

KEYED = '[api]\nkey = "admin-key-0123456789abcdefghij"\n'


def checked(tmp_path: Path, text: str) -> tuple[list[str], list[str]]:
    path = tmp_path / "signoff.toml"
    path.write_text(KEYED + text)
    settings = load_settings(path)
    registry = builtin_registry(entry_points_group=None)
    return (preflight.problems(settings, registry, path=path),
            preflight.notices(settings, registry, path=path))


def test_passkeys_need_https_and_a_host_name(tmp_path: Path) -> None:
    """http on a real host, or an IP address, is refused with the reason; https on a
    name, and http on localhost, are fine."""
    passkey = '[approvals]\nstep_up = ["SEND"]\nstep_up_with = "passkey"\n'
    for url, why in (("http://signoff.example.com", "needs daemon.public_url on https"),
                     ("https://10.0.0.5:8443", "cannot be an IP address")):
        problems, _ = checked(tmp_path, f'[daemon]\npublic_url = "{url}"\n{passkey}')
        assert [p for p in problems if "approvals.step_up_with" in p and why in p], problems
    for url in ("https://signoff.example.com", "http://localhost:8080"):
        problems, _ = checked(tmp_path, f'[daemon]\npublic_url = "{url}"\n{passkey}')
        assert not [p for p in problems if "step_up_with" in p], problems


def test_passkeys_without_step_up_classes_are_a_notice(tmp_path: Path) -> None:
    """step_up_with = "passkey" with an empty step_up is named as asking for nothing."""
    _, notices = checked(tmp_path, '[approvals]\nstep_up_with = "passkey"\n')
    assert any("approvals.step_up_with" in n and "lists none" in n for n in notices)
    _, quiet = checked(tmp_path, '[approvals]\nstep_up = ["SEND"]\nstep_up_with = "passkey"\n')
    assert not [n for n in quiet if "step_up_with" in n]
