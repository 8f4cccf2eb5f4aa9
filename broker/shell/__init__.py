"""The broker's asyncio shell: server, replica manager, fetchers, log manager, controller channel."""
