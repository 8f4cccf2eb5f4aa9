"""The `kraftpy` command line, the linearizability checker and the perf tools."""
