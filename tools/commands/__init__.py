"""The `kraftpy` CLI's commands, one module per command group."""
