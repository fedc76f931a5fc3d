"""Tools: the registry of the functions an agent may call (router.tools.registry), read from the specs
agents already hold (router.tools.importers), and found for a request (router.tools.search)."""
