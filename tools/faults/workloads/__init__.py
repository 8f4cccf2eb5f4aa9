"""Fault-run workloads beyond the send/read-back one of tools/faults/workload.py (docs/jepsen.md)."""
