"""Plain-text tables for the plans, reports and benchmark output."""

from collections.abc import Sequence


def format_table(rows: Sequence[Sequence[str]]) -> str:
    """Rows of strings as left-aligned columns (the first row is the header)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)
