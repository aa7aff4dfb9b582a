"""Drives a client-intelligence design-flow run through the MetaForge MCP sidecar with the
official Python `mcp` client (pip install mcp), as a person's chat client would.

Usage: mcp_run_driver.py <url> <api-key> <session> <project> <template>

Connects over streamable HTTP sending X-API-Key, a stable X-MetaForge-Session and
X-MetaForge-Project; declares elicitation and answers every elicitation/create (a gate's
question) with {"decision": "approve"}. Starts a client-mode run of <template> with
flow.start_run, then loops until the run ends: a posted task is listed (phase.list_tasks),
claimed (phase.claim, which waits for a person to approve the hold), its required deliverables
recorded (twin.commit_work_product) and handed back (phase.submit); an open gate is awaited
(flow.await_gate), which asks through elicitation. Prints one JSON object: the listed tools, the
run id, every step taken, the elicitations asked and the final flow state.
"""

import asyncio
import json
import sys
import time

from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

DEADLINE_SECONDS = 240


async def call(session, steps, tool, arguments):
    result = await session.call_tool(tool, arguments)
    structured = result.structured_content
    steps.append({"tool": tool, "isError": bool(result.is_error), "structured": structured})
    if result.is_error:
        raise RuntimeError(f"{tool} {arguments}: {json.dumps(structured)}")
    return structured


async def drive(session, project, template, asked):
    steps = []
    started = await call(session, steps, "flow.start_run",
                         {"template_id": template, "intelligence": "client", "project_id": project})
    run_id = started["run"]["id"]
    until = time.monotonic() + DEADLINE_SECONDS
    state = None
    while time.monotonic() < until:
        state = await call(session, steps, "flow.status", {"run_id": run_id})
        if state["status"] in ("completed", "failed", "canceled"):
            break
        if state.get("gate"):
            await call(session, steps, "flow.await_gate", {"run_id": run_id, "wait_seconds": 30})
            continue
        listed = await call(session, steps, "phase.list_tasks", {"run_id": run_id, "status": "open"})
        if not listed["tasks"]:
            await asyncio.sleep(0.2)
            continue
        task = listed["tasks"][0]
        claimed = await call(session, steps, "phase.claim", {"task_id": task["id"]})
        assert claimed["status"] == "claimed", claimed
        for artifact in task["brief"]["required_deliverables"]:
            await call(session, steps, "twin.commit_work_product", {
                "artifact": artifact,
                "title": f"{artifact} of {task['phase']}",
                "content": f"the {artifact} recorded by the MCP client",
            })
        await call(session, steps, "phase.submit", {"task_id": task["id"], "summary": f"did {task['phase']}"})
    return run_id, steps, state


async def main():
    url, key, session_id, project, template = sys.argv[1:6]
    asked = []

    async def on_elicit(context, params):
        asked.append({"message": params.message, "schema": params.requested_schema})
        return types.ElicitResult(action="accept", content={"decision": "approve"})

    headers = {"X-API-Key": key, "X-MetaForge-Session": session_id, "X-MetaForge-Project": project}
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1], elicitation_callback=on_elicit) as session:
                await session.initialize()
                listed = await session.list_tools()
                run_id, steps, state = await drive(session, project, template, asked)
    print(json.dumps({
        "tools": sorted(t.name for t in listed.tools),
        "run_id": run_id,
        "steps": steps,
        "elicitations": asked,
        "state": state,
    }))


asyncio.run(main())
