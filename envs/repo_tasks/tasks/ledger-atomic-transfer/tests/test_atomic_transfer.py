import unittest

from ledger import Account, InsufficientFunds, Money, transfer


class HiddenTest(unittest.TestCase):
    def test_failed_transfer_changes_nothing(self):
        a, b = Account("a"), Account("b")
        a.deposit(Money(50))
        with self.assertRaises(InsufficientFunds):
            transfer(a, b, Money(80))
        self.assertEqual((a.balance.cents, b.balance.cents), (50, 0))
        self.assertEqual(b.transactions, [])

    def test_deposit_and_withdraw(self):
        account = Account("ana")
        account.deposit(Money(1000))
        account.withdraw(Money(250))
        self.assertEqual(account.balance.cents, 750)
        self.assertEqual([kind for kind, _ in account.transactions], ["deposit", "withdraw"])

    def test_positive_str(self):
        self.assertEqual(str(Money(705, "EUR")), "7.05 EUR")

    def test_transfer_moves_money(self):
        a, b = Account("a"), Account("b")
        a.deposit(Money(300))
        transfer(a, b, Money(100))
        self.assertEqual((a.balance.cents, b.balance.cents), (200, 100))


if __name__ == "__main__":
    unittest.main()
