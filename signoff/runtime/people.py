"""Who counts as whom: the people behind the actor keys (``[[people]]``).

One person may answer from several accounts (``slack:U1``, ``telegram:42``, ``web:alice``,
``email:alice@example.com``). Every rule that compares deciders compares *people*, here
and nowhere else: a quorum counts people (two accounts of one person are one vote), the
self-approval rule compares the person who asked with the person who answers, and cards
and lines show the person's name. An actor key listed under nobody is a person of its own.

The wiring builds one `People` from the config and passes it in (the runtime never reads
the config); an account listed under two people is refused there, so here each account
has at most one person.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType


class PeopleError(ValueError):
    """An account listed under two people (names both)."""


@dataclass(frozen=True)
class People:
    """Each listed account's person; anyone else is their own person."""

    _owner: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, listed: Sequence[tuple[str, Sequence[str]]]) -> People:
        """``[(name, accounts), …]`` as a `People`; `PeopleError` when an account is listed
        under two people (one account cannot be two people's vote)."""
        found = clashes(listed)
        if found:
            raise PeopleError(found[0][2])
        return cls(MappingProxyType({a: name for name, accounts in listed for a in accounts}))

    def person(self, actor: str) -> tuple[str, str]:
        """Who ``actor`` is, as a key no actor key can spell: a listed person's name, or
        the actor itself."""
        name = self._owner.get(actor)
        return ("person", name) if name is not None else ("actor", actor)

    def same(self, one: str | None, other: str | None) -> bool:
        """True when both actor keys are the same person (False when either is unknown)."""
        if not one or not other:
            return False
        return self.person(one) == self.person(other)

    def name(self, actor: str) -> str:
        """What cards and lines show for ``actor``: its person's name, else the key."""
        return self._owner.get(actor, actor)

    def names(self, actors: Iterable[str]) -> list[str]:
        """The people behind ``actors``, each once, in order (``"alice, bob"`` on a card)."""
        return list(dict.fromkeys(self.name(a) for a in actors))

    def distinct(self, actors: Iterable[str]) -> list[str]:
        """``actors`` with every person kept once (the first of their accounts)."""
        seen: set[tuple[str, str]] = set()
        kept = []
        for actor in actors:
            if self.person(actor) not in seen:
                seen.add(self.person(actor))
                kept.append(actor)
        return kept


def clashes(listed: Sequence[tuple[str, Sequence[str]]]) -> list[tuple[int, int, str]]:
    """Every account listed under a second person, as (person's index, account's index,
    words naming both people)."""
    owner: dict[str, str] = {}
    found = []
    for i, (name, accounts) in enumerate(listed):
        for j, account in enumerate(accounts):
            other = owner.setdefault(account, name)
            if other != name:
                found.append((i, j, f"account {account!r} is listed under both {other!r} "
                                    f"and {name!r}"))
    return found


NOBODY_LISTED = People()  # no [[people]]: every account is a person of its own
