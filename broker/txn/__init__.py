"""Transactions on the broker: the transaction coordinator (sans-I/O) and `__transaction_state` records.

`TransactionCoordinator` (coordinator.py) is the object the shell (shell/) drives; `records` is
Kafka's TransactionLog layout; `metadata` one transactional id's state and its transitions.
"""
