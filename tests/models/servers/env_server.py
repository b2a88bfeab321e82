"""An MCP server with one tool that reports the names in its own environment."""

import os

from mcp.server import MCPServer

server = MCPServer("env")


@server.tool()
def environ_names() -> dict[str, list[str]]:
    """The names of this server's environment variables."""
    return {"names": sorted(os.environ)}


if __name__ == "__main__":
    server.run()
