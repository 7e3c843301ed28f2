// simba dashboard: keeps <main> live. The server renders (and escapes) every page; this
// script only patches the new <main> it receives over server-sent events into the page,
// touching the nodes that changed so that scrolling and text selection survive a refresh.
// With actions on, its buttons POST api/jobs/JOB/ACTION or api/schedules/ID/ACTION (relative to the page's <base>) with
// the token of the header's field (kept in this tab's sessionStorage, sent as `Authorization: Bearer`, never in a URL).
// A schedule's page is not live (no event stream): after its action succeeds it reloads, and shows the answer again.
"use strict";
(function () {
  var events = document.body.getAttribute("data-events");
  var main = document.getElementById("main");
  var live = document.getElementById("live");

  function setLive(ok, text) {
    live.className = ok ? "live" : "live off";
    live.textContent = text;
  }

  // Makes `old`'s children equal to `neu`'s, in place.
  function morph(old, neu) {
    var a = old.childNodes, b = neu.childNodes, i;
    for (i = 0; i < b.length; i++) {
      var o = a[i], n = b[i];
      if (!o) {
        old.appendChild(n.cloneNode(true));
      } else if (o.nodeType !== n.nodeType || o.nodeName !== n.nodeName) {
        old.replaceChild(n.cloneNode(true), o);
      } else if (o.nodeType === Node.TEXT_NODE) {
        if (o.nodeValue !== n.nodeValue) o.nodeValue = n.nodeValue;
      } else if (o.nodeType === Node.ELEMENT_NODE) {
        syncAttributes(o, n);
        morph(o, n);
      }
    }
    while (a.length > b.length) old.removeChild(old.lastChild);
  }

  function syncAttributes(o, n) {
    var i, at;
    for (i = o.attributes.length - 1; i >= 0; i--) {
      at = o.attributes[i].name;
      if (!n.hasAttribute(at)) o.removeAttribute(at);
    }
    for (i = 0; i < n.attributes.length; i++) {
      at = n.attributes[i];
      if (o.getAttribute(at.name) !== at.value) o.setAttribute(at.name, at.value);
    }
  }

  var KEY = "simba-dashboard-token";
  var SAID = "simba-dashboard-said";
  var field = document.getElementById("token");
  var flash = document.getElementById("flash");
  if (field) {
    field.value = sessionStorage.getItem(KEY) || "";
    field.addEventListener("input", function () { sessionStorage.setItem(KEY, field.value.trim()); });
  }

  function say(status, text) {
    flash.hidden = false;
    flash.className = status === 0 ? "" : status >= 200 && status < 300 ? "ok" : "bad";
    flash.setAttribute("data-status", String(status));
    flash.textContent = text;
  }

  var said = flash && sessionStorage.getItem(SAID);
  if (said) {
    sessionStorage.removeItem(SAID);
    say(200, said);
  }

  // `target` is "jobs/NAME" or "schedules/ID"; `body` the JSON text sent (or null).
  function act(target, action, body, reload) {
    var token = sessionStorage.getItem(KEY) || "";
    var headers = {};
    if (token) headers.Authorization = "Bearer " + token;
    if (body) headers["Content-Type"] = "application/json";
    say(0, action + " " + target + "…");
    // Relative: resolved against the page's <base>, the prefix the dashboard is mounted under.
    fetch("api/" + target + "/" + action, {
      method: "POST", headers: headers, body: body, credentials: "omit", cache: "no-store"
    }).then(function (res) {
      return res.text().then(function (body) {
        var msg = body.trim();
        try { msg = JSON.parse(body).message; } catch (e) { /* a text refusal */ }
        if (res.status === 401 || res.status === 403) {
          sessionStorage.removeItem(KEY);
          if (field) { field.value = ""; field.focus(); }
          msg += " (enter the action token in the field above)";
        }
        say(res.status, res.status + ": " + msg);
        if (reload && res.ok) {
          sessionStorage.setItem(SAID, res.status + ": " + msg);
          location.reload();
        }
      });
    }, function (err) { say(599, "request failed: " + err); });
  }

  document.addEventListener("click", function (e) {
    var b = e.target.closest ? e.target.closest("button.act") : null;
    if (!b || !flash) return;
    var schedule = b.getAttribute("data-schedule");
    if (schedule === null) {
      act("jobs/" + encodeURIComponent(b.getAttribute("data-job")), b.getAttribute("data-action"), null, false);
      return;
    }
    var note = document.getElementById("note");
    var body = note && note.value.trim() ? JSON.stringify({ note: note.value.trim() }) : null;
    act("schedules/" + encodeURIComponent(schedule), b.getAttribute("data-action"), body, true);
  });

  // A page rendered per request (the schedules pages) has no event stream.
  if (!events) return;
  var source = new EventSource(events);
  source.addEventListener("main", function (e) {
    var t = document.createElement("template");
    t.innerHTML = e.data;
    morph(main, t.content);
    setLive(true, "live");
  });
  source.onerror = function () { setLive(false, "reconnecting"); };
})();
