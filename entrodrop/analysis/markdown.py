"""The markdown tables every report prints (``report``'s table.md, ``multi_seed``'s seed tables,
the reproduction's claims, the benchmarks' timings): a module of its own, so that each imports it
without importing the others."""

from typing import List, Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    """A markdown table of ``rows`` under ``header``, without the columns that are empty (``-``)
    in every row: a column nothing fills says nothing. The first column (the row's name) stays.

    Example:
        >>> markdown_table(["run", "loss", "j0"], [["a", "1.5", "-"], ["b", "1.4", "-"]])
        ['| run | loss |', '|---|---|', '| a | 1.5 |', '| b | 1.4 |']
    """
    keep = [0] + [j for j in range(1, len(header)) if any(row[j] not in ("", "-") for row in rows)]
    return (["| " + " | ".join(header[j] for j in keep) + " |", "|" + "---|" * len(keep)]
            + ["| " + " | ".join(row[j] for j in keep) + " |" for row in rows])
