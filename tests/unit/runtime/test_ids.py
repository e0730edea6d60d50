"""Ids: a prefix and ten symbols read aloud from a phone without confusion, all used."""

from __future__ import annotations

import re
from collections import Counter

from signoff.runtime import ids


def test_ids_have_their_prefix_and_ten_unambiguous_symbols() -> None:
    """t-/a-/g- then 10 of the 32 symbols (no 0, o, 1, l)."""
    for make, prefix in ((ids.task_id, "t-"), (ids.approval_id, "a-"), (ids.grant_id, "g-")):
        assert re.fullmatch(re.escape(prefix) + r"[a-km-np-z2-9]{10}", make())


def test_every_symbol_is_used_and_ids_do_not_repeat() -> None:
    """Each of the 32 symbols turns up in every position; 20,000 ids are all distinct."""
    made = [ids.new_id("", 10) for _ in range(20_000)]
    assert len(set(made)) == len(made)
    for position in range(10):
        counts = Counter(i[position] for i in made)
        assert len(counts) == 32
        assert min(counts.values()) > 20_000 / 32 / 2  # no symbol starved


def test_a_forked_child_never_repeats_its_parents_ids() -> None:
    """Ids come from random bytes read ahead; a child forked after the parent read them
    must draw its own, not the parent's next ones (two processes, one id)."""
    import os

    ids.new_id("")  # the parent has bytes in hand
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        try:
            os.write(write, " ".join(ids.new_id("") for _ in range(50)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode().split()
    os.waitpid(pid, 0)
    parent = [ids.new_id("") for _ in range(50)]
    assert len(child) == 50
    assert not set(child) & set(parent)
