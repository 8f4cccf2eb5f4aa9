"""The transaction coordinator's asyncio shell: routes, __transaction_state appends and loading, markers."""
