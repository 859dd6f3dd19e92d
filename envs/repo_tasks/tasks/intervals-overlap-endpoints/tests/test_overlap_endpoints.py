import unittest

import intervals
from intervals import merge, overlaps, parse


class HiddenTest(unittest.TestCase):
    def test_shared_endpoint_overlaps(self):
        self.assertTrue(overlaps((1, 3), (3, 5)))
        self.assertTrue(overlaps((3, 5), (1, 3)))

    def test_point_overlaps_itself(self):
        self.assertTrue(overlaps((4, 4), (4, 4)))

    def test_apart_do_not_overlap(self):
        self.assertFalse(overlaps((1, 2), (3, 4)))

    def test_parse_ranges_and_points(self):
        self.assertEqual(parse("1-3,5,7-9"), [(1, 3), (5, 5), (7, 9)])

    def test_disjoint_intervals_stay_apart(self):
        self.assertEqual(merge([(5, 6), (1, 2)]), [(1, 2), (5, 6)])

    def test_nested_overlap(self):
        self.assertTrue(overlaps((1, 10), (3, 4)))


if __name__ == "__main__":
    unittest.main()
