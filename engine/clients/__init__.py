"""engine/clients."""
