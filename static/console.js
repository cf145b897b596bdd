// MemoryHub console: select-all for bulk actions, and the review queue's keyboard shortcuts.
(function () {
  "use strict";

  // --- bulk selection ---------------------------------------------------------------------
  function syncSelection(form) {
    if (!form) return;
    var boxes = form.querySelectorAll('input[name="ids"]');
    var checked = form.querySelectorAll('input[name="ids"]:checked').length;
    var all = form.querySelector("[data-select-all]");
    if (all) {
      all.checked = boxes.length > 0 && checked === boxes.length;
      all.indeterminate = checked > 0 && checked < boxes.length;
    }
    var count = form.querySelector("[data-selected-count]");
    if (count) count.textContent = checked + " selected";
    form.querySelectorAll("[data-needs-selection]").forEach(function (b) { b.disabled = checked === 0; });
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target.matches("[data-select-all]")) {
      var form = target.closest("form");
      form.querySelectorAll('input[name="ids"]').forEach(function (b) { b.checked = target.checked; });
      syncSelection(form);
    } else if (target.matches('input[name="ids"]')) {
      syncSelection(target.closest("form"));
    }
  });

  // `Export selected` is a download of the checked ids only (a plain GET without the form's
  // other fields, so no CSRF token ends up in a URL); without JS the form's GET still works.
  // --- small behaviours that would otherwise be inline handlers (the CSP forbids those) -----
  document.addEventListener("change", function (event) {
    if (event.target.matches("[data-autosubmit]")) event.target.form.requestSubmit();
  });
  document.addEventListener("click", function (event) {
    if (event.target.matches("[data-new-key]")) event.target.select();
  });
  // `Copy` next to a ready-to-paste snippet: the clipboard where the browser allows it, else
  // the snippet selected for Ctrl-C.
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (!button) return;
    var source = document.querySelector(button.getAttribute("data-copy"));
    if (!source) return;
    var done = function () { button.textContent = "Copied"; };
    var select = function () {
      var range = document.createRange();
      range.selectNodeContents(source);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      button.textContent = "Selected: Ctrl-C";
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(source.textContent).then(done, select);
    } else {
      select();
    }
  });

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-export-selected]");
    if (!button) return;
    var ids = Array.prototype.map.call(
      button.form.querySelectorAll('input[name="ids"]:checked'),
      function (box) { return "ids=" + encodeURIComponent(box.value); }
    );
    if (!ids.length) return;
    event.preventDefault();
    window.location.href = button.getAttribute("formaction") + "?" + ids.join("&");
  });

  function initSelections() {
    document.querySelectorAll("#bulk-form").forEach(syncSelection);
  }

  // --- review queue keyboard --------------------------------------------------------------
  function rows() { return Array.prototype.slice.call(document.querySelectorAll("[data-review-row]")); }

  function current() { return document.querySelector("[data-review-row].is-current"); }

  function select(row) {
    rows().forEach(function (r) { r.classList.remove("is-current"); });
    if (!row) return;
    row.classList.add("is-current");
    row.focus({ preventScroll: true });
    row.scrollIntoView({ block: "nearest" });
  }

  function move(step) {
    var list = rows();
    if (!list.length) return;
    var index = list.indexOf(current());
    select(list[Math.max(0, Math.min(list.length - 1, index + step))] || list[0]);
  }

  function typing(event) {
    var t = event.target;
    return t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName));
  }

  document.addEventListener("keydown", function (event) {
    if (!document.querySelector("[data-review-list]")) return;
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (typing(event)) {
      if (event.key === "Escape") { event.target.blur(); select(current()); }
      return;
    }
    var row = current();
    switch (event.key) {
      case "j": move(1); break;
      case "k": move(-1); break;
      case "a": if (row) row.querySelector("[data-key-approve]").click(); break;
      case "e": if (row) window.location.href = row.querySelector("[data-key-edit]").href; break;
      case "t": if (row) { var r = row.querySelector("[data-key-reason]"); r.focus(); } break;
      default: return;
    }
    event.preventDefault();
  });

  function countDown() {
    var count = document.querySelector("[data-pending-count]");
    var n = count ? parseInt(count.textContent, 10) : NaN;  // "1,000+" stays as it is
    if (n > 0 && String(n) === count.textContent.trim()) count.textContent = String(n - 1);
  }

  // When a reviewed row leaves the queue, the next one becomes current. (Events fired on the
  // swapped-out row do not reach the document, so watch for the row to be gone instead.)
  document.addEventListener("htmx:beforeSwap", function (event) {
    var row = event.detail.target;
    if (!(row && row.matches && row.matches("[data-review-row]"))) return;
    var list = rows();
    var index = list.indexOf(row);
    var next = list[index + 1] || list[index - 1] || null;
    var tries = 0;
    (function check() {
      if (!document.body.contains(row)) {
        countDown();
        if (next && document.body.contains(next)) select(next);
      } else if (tries++ < 100) {
        setTimeout(check, 20);
      }
    })();
  });
  document.addEventListener("htmx:afterSettle", initSelections);

  document.addEventListener("DOMContentLoaded", function () {
    initSelections();
    var first = rows()[0];
    if (first) select(first);
  });
})();
