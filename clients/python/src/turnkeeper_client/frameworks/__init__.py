"""One-line adapters that put turnkeeper in front of every model call of an agent framework.

Each framework has its own module and optional extra: `langchain` (LangChain / LangGraph
middleware, `turnkeeper-client[langchain]`), `openai_agents` (the OpenAI Agents SDK's input
filter, `[agents]`) and `litellm` (a `completion` wrapper and a proxy hook, `[litellm]`). The
framework keeps the full history; an adapter prepares each request from it and hands the
framework's own objects back. docs/frameworks.md shows each one-liner.
"""
