import unittest

from calc import evaluate


class EvaluateTest(unittest.TestCase):
    def test_precedence(self):
        self.assertEqual(evaluate("2 + 3 * 4"), 14)

    def test_parentheses(self):
        self.assertEqual(evaluate("2 * (3 + 4)"), 14)

    def test_left_associative(self):
        self.assertEqual(evaluate("2 - 3 - 4"), -5)
        self.assertEqual(evaluate("64 / 8 / 2"), 4)

    def test_negation(self):
        self.assertEqual(evaluate("-3 + 5"), 2)


if __name__ == "__main__":
    unittest.main()
