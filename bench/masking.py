"""URL masking of a hostile 1 MB payload, against serializing it with ``json.dumps``.

Run: ``python bench/masking.py [--size BYTES] [--repeat N]``.

Every card, console page, notification and log line passes what an agent wrote through
`signoff.runtime.text.mask`; an agent that can make that slow stalls every request, click
and the worker. The payload is tool arguments of ``--size`` characters: a long text — two thirds prose
with a URL (user info, query, fragment) every ~2 KB, one third the input that once took
~10 s (``"a." * n + "://"``: a scheme candidate at every word start, none of them a URL)
— and 100 small records each holding its own URL. Masking costs a few microseconds per
URL in Python, so a text packed with nothing but URLs costs more than this relative to
``json.dumps`` (which runs in C) — linearly, never more per character than that.

1. signoff: ``mask(payload)``.
2. baseline, in the same run: ``json.dumps(payload)`` — one pass over the same strings
   in C, what showing the payload as JSON costs anyway.

Prints ``ratio mask/json_dumps = X`` and ``ok`` (X <= 3) or ``over``; best of ``--repeat``
runs each, taking turns,
so a busy machine slows both sides alike.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from signoff.runtime.text import mask

TARGET = 3.0
SIZE = 1_000_000
RECORDS = 100  # small JSON records, each with its own URL (nothing a cache could answer)


def payload(size: int) -> dict[str, Any]:
    """About ``size`` characters of tool arguments as an agent sends them: a long text
    (prose with a URL every ~2 KB, then the hostile run) and a list of small records."""
    sentence = ("The report is at https://bob:hunter2@files.example.com/q3/report.pdf"
                "?token=abc123&sig=ffee#access_token=zz — please check it before sending. "
                + "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 32)
    items = [{"url": f"https://api.example.com/v1/items/{i}?key=s{i}&page=2", "n": i,
              "note": "plain words without any link"} for i in range(RECORDS)]
    room = size - len(json.dumps(items))
    prose = (sentence * (room // len(sentence) + 1))[: room * 2 // 3]
    hostile = "a." * (room // 6) + "://"
    return {"path": "notes/report.md", "content": prose + "\n" + hostile, "items": items}


def timed(runs: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """The fastest of ``repeat`` runs of each, in seconds; the runs take turns, so a
    machine busy with something else slows both sides alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: min(values) for name, values in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=SIZE)
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    data = payload(args.size)
    size = len(json.dumps(data))
    best = timed({"json_dumps": lambda: json.dumps(data), "mask": lambda: mask(data)},
                 args.repeat)
    baseline, masked = best["json_dumps"], best["mask"]
    ratio = masked / baseline
    print(f"payload: {size / 1e6:.2f} MB of JSON")
    print(f"json_dumps: {baseline * 1e3:.1f} ms, mask: {masked * 1e3:.1f} ms")
    print(f"ratio mask/json_dumps = {ratio:.2f}")
    print("ok" if ratio <= TARGET else "over")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
