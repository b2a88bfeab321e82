"""A third-party MCP server, as someone else would write it: the SDK's high-level
``MCPServer``, schemas derived from type hints, effects only as annotations. LoopKernel
attaches it by its command line alone."""

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("weather-demo")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def forecast(city: str, days: int = 1) -> dict[str, object]:
    """Forecast for a city."""
    return {"city": city, "days": days, "sky": "clear"}


@server.tool()
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper()


@server.tool(annotations=ToolAnnotations(idempotent_hint=True))
def broken(reason: str) -> str:
    """Raises a ToolError-style failure."""
    raise ValueError(f"broken on purpose: {reason}")


if __name__ == "__main__":
    server.run()
