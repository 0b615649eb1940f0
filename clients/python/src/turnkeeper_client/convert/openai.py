"""The former name of `turnkeeper_client.convert.openai_chat`, kept so that existing imports work.

The converter modules of the four clients are named after the format (and its passthrough key):
`openai_chat`, `openai_responses`, `anthropic`.
"""

from .openai_chat import FORMAT, default_skeleton, from_openai, to_openai

__all__ = ["FORMAT", "default_skeleton", "from_openai", "to_openai"]
