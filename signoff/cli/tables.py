"""Tables for people at a terminal, shared by every CLI command that prints one.

One style everywhere: plain columns without box lines, like `ps` or `kubectl get` (a
double-click selects an id), one line per row, never wrapped, and never wider than the
terminal (80 columns when it is not one: set COLUMNS to change it). What does not fit is
cut with "…": the free-text columns (goals, targets, reasons) first, down to `FOLD_MIN`,
then the widest of the others. Scripts use ``--json``, which is never cut.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.table import Table

GAP = 2  # spaces between columns
FOLD_MIN = 10  # narrowest a free-text column gets before the other columns are cut
CUT = "…"


def cut(text: str, width: int) -> str:
    """Each line of ``text`` in at most ``width`` cells, ending in "…" where cut."""
    return "\n".join(line if cell_len(line) <= width else
                     set_cell_size(line, max(width - 1, 0)) + CUT
                     for line in text.split("\n"))


@dataclass(frozen=True)
class Col:
    """One column: its header, and whether its values must stay whole (ids, states)."""

    header: str
    whole: bool = True


class Grid:
    """Rows of strings under `Col` headers, printed as a Rich table that keeps ids whole."""

    def __init__(self, *columns: Col, title: str | None = None) -> None:
        self.columns = columns
        self.title = title
        self.rows: list[tuple[str, ...]] = []

    def add(self, *cells: str | None) -> None:
        """Add a row (None prints as an empty cell)."""
        if len(cells) != len(self.columns):
            raise ValueError(f"expected {len(self.columns)} cells, got {len(cells)}")
        self.rows.append(tuple(c or "" for c in cells))

    def widths(self, total: int) -> list[int]:
        """Each column's width so that the table fits in ``total`` cells."""
        widths = [max([cell_len(col.header)] + [_widest_line(r[i]) for r in self.rows])
                  for i, col in enumerate(self.columns)]
        budget = total - GAP * (len(self.columns) - 1)
        while sum(widths) > budget:
            free = [i for i, col in enumerate(self.columns)
                    if not col.whole and widths[i] > FOLD_MIN]
            pick = max(free or range(len(widths)), key=lambda i: widths[i])
            if widths[pick] <= 1:
                break  # a terminal narrower than one cell per column: nothing left to cut
            widths[pick] -= 1
        return widths

    def table(self, total: int) -> Table:
        """The Rich table, ``total`` cells wide at most."""
        table = Table(box=None, padding=(0, GAP, 0, 0), pad_edge=False, show_edge=False,
                      header_style="bold", title=cut(self.title, total) if self.title else None,
                      title_justify="left", expand=False)
        widths = self.widths(total)
        for col, width in zip(self.columns, widths, strict=True):
            table.add_column(cut(col.header, width), width=width, no_wrap=True,
                             overflow="ellipsis")
        for row in self.rows:
            table.add_row(*(cut(cell, width) for cell, width in zip(row, widths, strict=True)))
        return table

    def print(self, console: Console) -> None:
        """Print at the console's width (80 columns when it is no terminal)."""
        console.print(self.table(console.width), soft_wrap=False, crop=True)


def _widest_line(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)
