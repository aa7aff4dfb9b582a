// MetaForge console: the live parts, on top of pages that work without this script.
// - #queue[data-live]: the approvals queue re-reads itself every 2 s (a new hold shows up).
// - #flow-graph[data-events]: a run page follows the run's notices and redraws its graph.
// - form[data-stream]: a chat message streams its turn here; held calls are answered inline.
"use strict";
(function () {
  var csrf = document.body.dataset.csrf || "";

  function busy(el) {
    var a = document.activeElement;
    return a && el.contains(a) && (a.tagName === "INPUT" || a.tagName === "TEXTAREA" || a.tagName === "SELECT");
  }

  function alertText(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var alert = doc.querySelector("[role=alert]");
    return alert ? alert.textContent : "refused";
  }

  var queue = document.querySelector("#queue[data-live]");
  if (queue) {
    var last = null;
    setInterval(function () {
      if (busy(queue)) return;
      fetch(queue.dataset.live, { credentials: "same-origin" }).then(function (r) {
        return r.ok ? r.text() : null;
      }).then(function (html) {
        if (html !== null && html !== last && !busy(queue)) { queue.innerHTML = html; last = html; }
      }).catch(function () {});
    }, 2000);
  }

  var graph = document.querySelector("#flow-graph[data-events]");
  if (graph) {
    var timer = null;
    var refresh = function () {
      if (timer) return;
      timer = setTimeout(function () {
        timer = null;
        if (busy(graph)) { refresh(); return; }
        fetch(graph.dataset.live, { credentials: "same-origin" }).then(function (r) {
          return r.ok ? r.text() : null;
        }).then(function (html) { if (html !== null) graph.innerHTML = html; }).catch(function () {});
      }, 250);
    };
    var events = new EventSource(graph.dataset.events);
    events.addEventListener("notice", refresh);
    events.onerror = function () { events.close(); refresh(); };
  }

  function line(parent, cls, text) {
    var li = document.createElement("li");
    li.className = cls;
    li.textContent = text;
    parent.appendChild(li);
    return li;
  }

  // Held calls shown inline, by call id, so a result (the call ran or was refused) closes them.
  var held = {};

  function heldCall(list, data) {
    var li = line(list, "event held", "Held for a person: " + data.tool + " " + JSON.stringify(data.arguments));
    held[data.call_id] = li;
    var status = document.createElement("span");
    status.setAttribute("role", "status");
    ["approve", "reject"].forEach(function (decision) {
      var button = document.createElement("button");
      button.type = "button";
      button.className = decision;
      button.textContent = decision === "approve" ? "Approve" : "Reject";
      button.addEventListener("click", function () {
        var body = new URLSearchParams({ csrf: csrf, decision: decision, return_to: location.pathname });
        fetch("/approvals/" + encodeURIComponent(data.approval_id), { method: "POST", body: body, credentials: "same-origin" })
          .then(function (r) {
            if (r.ok) { status.textContent = " " + decision + "d"; li.querySelectorAll("button").forEach(function (b) { b.disabled = true; }); return; }
            return r.text().then(function (html) { status.textContent = " " + alertText(html); });
          });
      });
      li.appendChild(document.createTextNode(" "));
      li.appendChild(button);
    });
    li.appendChild(status);
  }

  var post = document.querySelector("form[data-stream]");
  if (post) {
    post.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var textarea = post.querySelector("textarea");
      var body = new URLSearchParams(new FormData(post));
      var messages = document.getElementById("messages");
      var turn = document.getElementById("turn");
      line(messages, "msg user", textarea.value);
      textarea.value = "";
      turn.innerHTML = "";
      var list = document.createElement("ol");
      list.className = "events";
      turn.appendChild(list);
      var reply = null;
      fetch(post.action, { method: "POST", body: body, credentials: "same-origin", headers: { "x-console-stream": "1" } })
        .then(function (r) {
          var type = r.headers.get("content-type") || "";
          if (!r.ok || type.indexOf("text/event-stream") !== 0) {
            return r.text().then(function (html) { line(list, "event notice error", alertText(html)); });
          }
          var reader = r.body.getReader();
          var decoder = new TextDecoder();
          var buffer = "";
          var handle = function (name, data) {
            if (name === "message.delta") {
              if (!reply) reply = line(messages, "msg assistant", "");
              reply.textContent += data.text;
            } else if (name === "tool.call") {
              line(list, "event", "→ " + data.tool + " " + JSON.stringify(data.arguments));
            } else if (name === "tool.result") {
              var waiting = held[data.call_id];
              if (waiting) {
                waiting.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
                var said = waiting.querySelector("[role=status]");
                if (said && !said.textContent) said.textContent = " answered";
                delete held[data.call_id];
              }
              line(list, "event", "← " + data.tool + (data.is_error ? " (error)" : "") + ": " + data.content);
            } else if (name === "tool.approval_requested") {
              heldCall(list, data);
            } else if (name === "notify_error") {
              line(list, "event notice error", data.code + ": " + data.message);
            } else if (name === "agent.done") {
              line(list, "event done", "turn done");
            }
          };
          var pump = function () {
            return reader.read().then(function (chunk) {
              if (chunk.done) return;
              buffer += decoder.decode(chunk.value, { stream: true });
              var parts = buffer.split("\n\n");
              buffer = parts.pop();
              parts.forEach(function (part) {
                var name = "message", data = "";
                part.split("\n").forEach(function (l) {
                  if (l.indexOf("event:") === 0) name = l.slice(6).trim();
                  else if (l.indexOf("data:") === 0) data += l.slice(5).trim();
                });
                if (data) { try { handle(name, JSON.parse(data)); } catch (e) { /* a keep-alive or a partial line */ } }
              });
              return pump();
            });
          };
          return pump();
        })
        .catch(function (e) { line(list, "event notice error", "the turn's stream broke: " + e); });
    });
  }
})();
