import unittest

import intervals
from intervals import merge, overlaps, parse


class HiddenTest(unittest.TestCase):
    def test_touching_intervals_merge(self):
        self.assertEqual(merge([(3, 5), (1, 3)]), [(1, 5)])

    def test_chain_of_touching_intervals(self):
        self.assertEqual(merge([(1, 2), (2, 4), (4, 4), (9, 9)]), [(1, 4), (9, 9)])

    def test_parse_ranges_and_points(self):
        self.assertEqual(parse("1-3,5,7-9"), [(1, 3), (5, 5), (7, 9)])

    def test_disjoint_intervals_stay_apart(self):
        self.assertEqual(merge([(5, 6), (1, 2)]), [(1, 2), (5, 6)])

    def test_nested_overlap(self):
        self.assertTrue(overlaps((1, 10), (3, 4)))


if __name__ == "__main__":
    unittest.main()
