import unittest

from ledger import Account, Money


class BasicTest(unittest.TestCase):
    def test_deposit(self):
        account = Account("ana")
        account.deposit(Money(500))
        self.assertEqual(account.balance, Money(500))

    def test_money_str(self):
        self.assertEqual(str(Money(1234)), "12.34 USD")


if __name__ == "__main__":
    unittest.main()
