"""Language-neutral conformance vectors and their Python runner."""
