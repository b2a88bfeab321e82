"""A low-level MCP server that publishes an outputSchema and then breaks it (a number sent
as the string "0.40"). The SDK's low-level server checks nothing; LoopKernel's client must."""

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

QUOTE = types.Tool(
    name="quote",
    description="A price quote.",
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    output_schema={
        "type": "object",
        "properties": {"price": {"type": "number"}},
        "required": ["price"],
    },
)


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[QUOTE])


async def call_tool(ctx, params):
    return types.CallToolResult(
        content=[types.TextContent(text='{"price": "0.40"}')], structured_content={"price": "0.40"}
    )


async def main():
    server = Server("lying", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
