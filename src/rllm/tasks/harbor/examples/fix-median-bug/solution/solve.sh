#!/bin/bash
# The reference solution: average the two middle values when the list has an even length.
set -euo pipefail
cat > /app/stats.py <<'PY'
"""Small statistics helpers."""


def mean(values):
    """The arithmetic mean of a non-empty list of numbers."""
    return sum(values) / len(values)


def median(values):
    """The middle value of a non-empty list of numbers (the mean of the two middle ones for an even length)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2 == 0:
        return (ordered[middle - 1] + ordered[middle]) / 2
    return ordered[middle]
PY
