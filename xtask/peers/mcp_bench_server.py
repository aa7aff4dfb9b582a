"""The Python MCP SDK peer for `cargo xtask bench mcp`: one read tool, `flow.list`, answering the
same text the MetaForge sidecar's `flow.list` answers, over streamable HTTP with JSON responses.

usage: python3 mcp_bench_server.py PORT TEXT_FILE
"""

import sys

from mcp.server.mcpserver import MCPServer

port = int(sys.argv[1])
with open(sys.argv[2], encoding="utf-8") as f:
    TEXT = f.read()

server = MCPServer("bench-peer", log_level="WARNING")


@server.tool(name="flow.list", description="Lists the design-flow templates (fixed text).")
def flow_list() -> str:
    return TEXT


server.run("streamable-http", host="127.0.0.1", port=port, json_response=True)
