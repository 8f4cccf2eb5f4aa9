"""Metadata's asyncio shell: the controller component and the image publisher."""
