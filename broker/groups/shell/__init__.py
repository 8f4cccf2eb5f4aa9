"""The group coordinator's asyncio shell: routes, appends to __consumer_offsets, loading."""
