"""Drives the MetaForge MCP sidecar with the official Python `mcp` client (pip install mcp).

Usage: mcp_python_client.py stdio <metaforge-binary> <calls.json>
       mcp_python_client.py http <url> <calls.json>

calls.json is a list of {"tool": name, "arguments": {...}, "answers": {...}?}; when "answers" is
given the client declares elicitation and answers any elicitation/create with them. Prints one
JSON object: the listed tool names and, per call, the result's structuredContent and isError.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


async def drive(read, write, calls):
    answers = next((c["answers"] for c in calls if "answers" in c), None)
    asked = []

    async def on_elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content=answers)

    kwargs = {"elicitation_callback": on_elicit} if answers is not None else {}
    async with ClientSession(read, write, **kwargs) as session:
        init = await session.initialize()
        listed = await session.list_tools()
        results = []
        for call in calls:
            result = await session.call_tool(call["tool"], call.get("arguments", {}))
            results.append({
                "tool": call["tool"],
                "isError": bool(result.is_error),
                "structured": result.structured_content,
            })
        return {
            "protocolVersion": init.protocol_version,
            "server": init.server_info.name,
            "tools": sorted(t.name for t in listed.tools),
            "elicitations": asked,
            "results": results,
        }


async def main():
    mode, target, calls_path = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(calls_path) as f:
        calls = json.load(f)
    if mode == "stdio":
        env = {k: v for k, v in os.environ.items() if k in ("METAFORGE_HOME", "RUST_LOG", "HOME", "PATH")}
        params = StdioServerParameters(command=target, args=["mcp", "serve", "--stdio"], env=env)
        async with stdio_client(params) as (read, write):
            out = await drive(read, write, calls)
    else:
        async with streamable_http_client(target) as streams:
            out = await drive(streams[0], streams[1], calls)
    print(json.dumps(out))


asyncio.run(main())
