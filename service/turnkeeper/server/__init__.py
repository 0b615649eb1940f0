"""gRPC adapters over the turnkeeper engine."""
