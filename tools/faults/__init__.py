"""Fault runs (`kraftpy faults`): real network partitions in namespaces, nemeses, the run itself."""
