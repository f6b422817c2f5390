// delayq dashboard: confirmations and auto-refresh. No dependencies.
(function () {
  'use strict';

  // Destructive forms carry data-confirm: ask, and mark the form confirmed
  // so the server skips its own confirmation page.
  document.addEventListener('submit', function (e) {
    var form = e.target;
    var question = form.getAttribute('data-confirm');
    if (!question) {
      return;
    }
    if (!window.confirm(question)) {
      e.preventDefault();
      return;
    }
    var field = form.querySelector('input[name="confirmed"]');
    if (field) {
      field.value = 'yes';
    }
  });

  // Auto-refresh: fetch the page again and swap the elements marked
  // data-live, so forms being filled in and the scroll position stay.
  var seconds = parseInt(document.body.getAttribute('data-refresh'), 10);
  var box = document.getElementById('auto-refresh');
  if (!seconds || !box) {
    return;
  }
  var key = 'delayq-auto-refresh';
  try {
    box.checked = window.localStorage.getItem(key) !== 'off';
  } catch (_) { /* storage disabled */ }
  box.addEventListener('change', function () {
    try {
      window.localStorage.setItem(key, box.checked ? 'on' : 'off');
    } catch (_) { /* storage disabled */ }
  });

  function schedule() {
    window.setTimeout(refresh, seconds * 1000);
  }

  function refresh() {
    if (!box.checked || document.hidden) {
      schedule();
      return;
    }
    window.fetch(window.location.href, { credentials: 'same-origin', headers: { Accept: 'text/html' } })
      .then(function (res) {
        if (!res.ok) {
          throw new Error('HTTP ' + res.status);
        }
        return res.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, 'text/html');
        document.querySelectorAll('[data-live]').forEach(function (el) {
          var next = el.id && fresh.getElementById(el.id);
          if (next) {
            el.replaceWith(document.importNode(next, true));
          }
        });
        document.body.setAttribute('data-refreshed', String(Date.now()));
      })
      .catch(function () { /* keep the page as it is; try again later */ })
      .then(schedule);
  }

  schedule();
})();
