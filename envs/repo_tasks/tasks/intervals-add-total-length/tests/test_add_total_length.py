import unittest

import intervals
from intervals import merge, overlaps, parse


class HiddenTest(unittest.TestCase):
    def test_overlapping_counted_once(self):
        self.assertEqual(intervals.total_length([(1, 3), (2, 5)]), 5)

    def test_empty(self):
        self.assertEqual(intervals.total_length([]), 0)

    def test_points_and_ranges(self):
        self.assertEqual(intervals.total_length([(3, 4), (1, 1), (10, 10)]), 4)

    def test_parse_ranges_and_points(self):
        self.assertEqual(parse("1-3,5,7-9"), [(1, 3), (5, 5), (7, 9)])

    def test_disjoint_intervals_stay_apart(self):
        self.assertEqual(merge([(5, 6), (1, 2)]), [(1, 2), (5, 6)])

    def test_nested_overlap(self):
        self.assertTrue(overlaps((1, 10), (3, 4)))


if __name__ == "__main__":
    unittest.main()
