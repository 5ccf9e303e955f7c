// The console's only script: confirmations, live job pages, refreshing tables.
// Values from the server are written with textContent, never parsed as HTML,
// except the tables that /queues and /workers render (already escaped there).
"use strict";

(function () {
  function each(selector, root, fn) {
    Array.prototype.forEach.call((root || document).querySelectorAll(selector), fn);
  }

  // Actions ask first: a form with data-confirm submits only once confirmed.
  function confirmations() {
    each("form[data-confirm]", document, function (form) {
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.getAttribute("data-confirm"))) {
          event.preventDefault();
        }
      });
    });
  }

  function setBadge(badge, status) {
    badge.textContent = status;
    badge.className = "status s-" + status.toLowerCase();
  }

  function applySnapshot(root, snap) {
    each("[data-field]", root, function (el) {
      var key = el.getAttribute("data-field");
      if (Object.prototype.hasOwnProperty.call(snap, key)) {
        el.textContent = snap[key];
      }
    });
    each(".job-head [data-status], .fields [data-status]", root, function (badge) {
      setBadge(badge, snap.status);
    });
    each("[data-progress]", root, function (bar) {
      bar.value = snap.progress;
    });
    each("[data-show-when]", root, function (form) {
      var when = form.getAttribute("data-show-when");
      form.hidden = !(when === "cancel" ? snap.can_cancel : snap.can_retry);
    });
    each("[data-result]", root, function (el) {
      el.textContent = snap.result;
    });
    each("[data-result-section]", root, function (el) {
      el.hidden = !snap.result;
    });
    (snap.children || []).forEach(function (child) {
      each("tr[data-child]", root, function (row) {
        if (row.getAttribute("data-child") !== child.id) {
          return;
        }
        each("[data-status]", row, function (badge) {
          setBadge(badge, child.status);
        });
        each("[data-child-field=error_code]", row, function (el) {
          el.textContent = child.error_code;
        });
      });
    });
  }

  function setLiveState(root, text) {
    each("[data-live-state]", root, function (el) {
      el.textContent = text;
    });
  }

  // A job page follows its job over server-sent events until it ends.
  function liveJob(root) {
    var source = new EventSource(root.getAttribute("data-events"));
    source.addEventListener("open", function () {
      setLiveState(root, "live");
    });
    source.addEventListener("job", function (event) {
      applySnapshot(root, JSON.parse(event.data));
    });
    source.addEventListener("problem", function (event) {
      setLiveState(root, JSON.parse(event.data).message);
    });
    source.addEventListener("end", function () {
      source.close();
      setLiveState(root, "ended");
    });
    source.addEventListener("error", function () {
      if (source.readyState !== EventSource.CLOSED) {
        setLiveState(root, "reconnecting…");
      }
    });
  }

  // A bulk retry's page follows its progress.
  function liveBulk(root) {
    var source = new EventSource(root.getAttribute("data-bulk-events"));
    source.addEventListener("progress", function (event) {
      var progress = JSON.parse(event.data);
      each("[data-bulk]", root, function (el) {
        var key = el.getAttribute("data-bulk");
        if (key === "failed") {
          el.textContent = progress.failures.length;
        } else if (key === "state") {
          el.textContent = progress.finished ? "finished" : "running…";
        } else if (key in progress) {
          el.textContent = progress[key];
        }
      });
      each("[data-bulk-progress]", root, function (bar) {
        bar.max = progress.total;
        bar.value = progress.done;
      });
      each("[data-bulk-failures]", root, function (list) {
        list.replaceChildren();
        progress.failures.forEach(function (failure) {
          var item = document.createElement("li");
          var link = document.createElement("a");
          link.className = "id";
          link.href = "/jobs/" + encodeURIComponent(failure.id);
          link.textContent = failure.id;
          var why = document.createElement("span");
          why.textContent = " " + failure.error;
          item.append(link, why);
          list.append(item);
        });
      });
    });
    source.addEventListener("end", function () {
      source.close();
    });
  }

  // Tables that re-read themselves (queues, workers).
  function refreshing(box) {
    var every = 1000 * Number(box.getAttribute("data-every") || "5");
    function refresh() {
      fetch(box.getAttribute("data-refresh"), { credentials: "same-origin" })
        .then(function (response) {
          if (response.redirected) {
            window.location.reload();  // signed out meanwhile: show the sign-in page
            return null;
          }
          return response.text();
        })
        .then(function (html) {
          if (html !== null) {
            box.innerHTML = html;
          }
        })
        .catch(function () { /* the next refresh tries again */ });
    }
    window.setInterval(refresh, every);
  }

  document.addEventListener("DOMContentLoaded", function () {
    confirmations();
    each("[data-events]", document, liveJob);
    each("[data-bulk-events]", document, liveBulk);
    each("[data-refresh]", document, refreshing);
  });
})();
