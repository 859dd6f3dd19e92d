import unittest

import intervals
from intervals import merge, overlaps, parse


class HiddenTest(unittest.TestCase):
    def test_trailing_and_doubled_commas(self):
        self.assertEqual(parse("1-3,,5,"), [(1, 3), (5, 5)])

    def test_empty_string(self):
        self.assertEqual(parse(""), [])

    def test_spaces_around_items(self):
        self.assertEqual(parse(" 2 , 4-6 "), [(2, 2), (4, 6)])

    def test_parse_ranges_and_points(self):
        self.assertEqual(parse("1-3,5,7-9"), [(1, 3), (5, 5), (7, 9)])

    def test_disjoint_intervals_stay_apart(self):
        self.assertEqual(merge([(5, 6), (1, 2)]), [(1, 2), (5, 6)])

    def test_nested_overlap(self):
        self.assertTrue(overlaps((1, 10), (3, 4)))


if __name__ == "__main__":
    unittest.main()
