"""Tables for people at a terminal, shared by every CLI command that prints one.

Ids, states, scopes and times are what people copy and grep, so their columns never wrap
and are never cut: only the free-text columns (goals, targets, reasons) fold. At 80
columns that fits; a terminal too narrow even for the whole-word columns gets the table
at the width it needs (the terminal wraps the line, but no id is split by us).
Plain columns without box lines, like `ps` or `kubectl get`: a double-click selects an id.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

GAP = 2  # spaces between columns
FOLD_MIN = 10  # narrowest a free-text column gets before the table grows past the terminal


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

    def needed_width(self) -> int:
        """The narrowest width at which no whole column is cut."""
        total = GAP * (len(self.columns) - 1)
        for i, col in enumerate(self.columns):
            widest = max([cell_len(col.header)] + [_widest_line(r[i]) for r in self.rows])
            total += widest if col.whole else min(widest, FOLD_MIN)
        return total

    def table(self) -> Table:
        """The Rich table."""
        table = Table(box=None, padding=(0, GAP, 0, 0), pad_edge=False, show_edge=False,
                      header_style="bold", title=self.title, title_justify="left")
        for col in self.columns:
            if col.whole:
                table.add_column(col.header, no_wrap=True)
            else:
                table.add_column(col.header, overflow="fold", min_width=FOLD_MIN)
        for row in self.rows:
            table.add_row(*row)
        return table

    def print(self, console: Console) -> None:
        """Print at the console's width, or wider if the whole columns need it."""
        needed = self.needed_width()
        if needed <= console.width:
            console.print(self.table())
            return
        wide = Console(width=needed, file=console.file, highlight=False, soft_wrap=True,
                       force_terminal=console.is_terminal, no_color=console.no_color)
        wide.print(self.table())


def _widest_line(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)
