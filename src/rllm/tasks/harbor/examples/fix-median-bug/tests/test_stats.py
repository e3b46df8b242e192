"""Checks of /app/stats.py (standard library only: unittest)."""

import sys
import unittest

sys.path.insert(0, "/app")

import stats


class MedianTest(unittest.TestCase):
    def test_odd_lengths(self):
        self.assertEqual(stats.median([3, 1, 2]), 2)
        self.assertEqual(stats.median([7]), 7)
        self.assertEqual(stats.median([5, 9, 1, 3, 7]), 5)

    def test_even_lengths(self):
        self.assertEqual(stats.median([4, 1, 3, 2]), 2.5)
        self.assertEqual(stats.median([10, 20]), 15)
        self.assertEqual(stats.median([1, 1, 2, 6, 8, 9]), 4)

    def test_input_is_not_changed(self):
        values = [3, 1, 2, 4]
        stats.median(values)
        self.assertEqual(values, [3, 1, 2, 4])

    def test_mean_is_unchanged(self):
        self.assertEqual(stats.mean([1, 2, 3, 4]), 2.5)


if __name__ == "__main__":
    unittest.main(verbosity=2)
