"""The looplab loop on LangGraph: ``python -m bench.langgraph_loop`` (needs the bench extra)."""
