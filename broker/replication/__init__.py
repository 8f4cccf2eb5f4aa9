"""Partition replication decisions (sans-I/O): leader HW and ISR, follower truncation, acks, idempotence."""
