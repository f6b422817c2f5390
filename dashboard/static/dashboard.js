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

  // status shows, above the page's content, why the data may not be
  // current; an empty text removes it.
  function status(kind, text, link) {
    var el = document.getElementById('refresh-status');
    if (!text) {
      if (el) {
        el.remove();
      }
      return;
    }
    if (!el) {
      el = document.createElement('p');
      el.id = 'refresh-status';
      el.setAttribute('role', 'status');
      var main = document.querySelector('main');
      main.insertBefore(el, main.firstChild);
    }
    el.className = 'notice ' + kind;
    el.setAttribute('data-kind', kind);
    el.textContent = text;
    if (link) {
      var a = document.createElement('a');
      a.href = link;
      a.textContent = ' Show where it went.';
      el.appendChild(a);
    }
  }

  function clock() {
    return new Date().toISOString().slice(11, 19) + ' UTC';
  }

  var lastGood = clock();

  // gone: the page's subject no longer exists (or moved to another page):
  // say so, drop its actions, stop refreshing.
  function gone(link) {
    var live = document.querySelector('[data-gone]');
    var text = (live && live.getAttribute('data-gone')) || 'What this page shows is gone.';
    status('bad gone', text + ' (last refreshed ' + lastGood + ')', link);
    document.querySelectorAll('[data-actions]').forEach(function (el) { el.remove(); });
    document.querySelectorAll('[data-live]').forEach(function (el) { el.classList.add('is-gone'); });
    document.body.setAttribute('data-gone', 'true');
    box.disabled = true; // refreshing stops: nothing here will change
  }

  function refresh() {
    if (!box.checked || document.hidden) {
      schedule();
      return;
    }
    var stop = false;
    window.fetch(window.location.href, { credentials: 'same-origin', headers: { Accept: 'text/html' } })
      .then(function (res) {
        if (res.status === 404 || res.status === 410) {
          gone();
          stop = true;
          return null;
        }
        if (!res.ok) {
          throw new Error('HTTP ' + res.status);
        }
        if (res.redirected && document.querySelector('[data-gone]')) {
          // A job that died is shown on the dead-letter page now.
          gone(res.url);
          stop = true;
          return null;
        }
        return res.text();
      })
      .then(function (html) {
        if (html === null) {
          return;
        }
        var fresh = new DOMParser().parseFromString(html, 'text/html');
        document.querySelectorAll('[data-live]').forEach(function (el) {
          var next = el.id && fresh.getElementById(el.id);
          if (next) {
            el.replaceWith(document.importNode(next, true));
          }
        });
        lastGood = clock();
        status('', '');
        document.body.setAttribute('data-refreshed', String(Date.now()));
        if (!parseInt(fresh.body.getAttribute('data-refresh'), 10)) {
          stop = true; // the page's subject stopped changing (a job that ended)
        }
      })
      .catch(function (err) {
        // Keep the page and try again, but say its data is stale.
        status('bad stale', 'Could not refresh (' + (err && err.message ? err.message : 'network error') +
          '): the data below is from ' + lastGood + ' and may be stale. Trying again.');
        document.body.setAttribute('data-stale', String(Date.now()));
      })
      .then(function () {
        if (!stop) {
          schedule();
        }
      });
  }

  schedule();
})();
