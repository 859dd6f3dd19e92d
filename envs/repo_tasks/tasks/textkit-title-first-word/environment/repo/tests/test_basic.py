import unittest

from textkit import slugify, title_case, wrap


class BasicTest(unittest.TestCase):
    def test_slugify_words(self):
        self.assertEqual(slugify("Hello World"), "hello-world")

    def test_title_case_words(self):
        self.assertEqual(title_case("war and peace"), "War and Peace")

    def test_wrap_short_text(self):
        self.assertEqual(wrap("one two", 20), ["one two"])


if __name__ == "__main__":
    unittest.main()
