import unittest

from intervals import merge, parse


class BasicTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(parse("1-3,5"), [(1, 3), (5, 5)])

    def test_merge_overlapping(self):
        self.assertEqual(merge([(4, 6), (1, 5)]), [(1, 6)])


if __name__ == "__main__":
    unittest.main()
