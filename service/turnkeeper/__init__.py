"""turnkeeper: conversation-history management for LLM agent runtimes."""
