// The dashboard: one view at a time (the address's #fragment), polled every second without
// reloading the page; with a server that has tokens, the page asks for one first.

import { Unauthorized, forgetToken, keepToken, token } from './api.js';
import { byId, clock } from './dom.js';
import * as health from './health.js';
import * as locks from './locks.js';
import * as queues from './queues.js';
import * as timeline from './timeline.js';

const VIEWS = { locks, queues, timeline, health };
const EVERY = 1000;

let timer = null;
let round = 0;

function current() {
  const name = window.location.hash.slice(1);
  return VIEWS[name] ? name : 'locks';
}

function show() {
  const name = current();
  for (const view of Object.keys(VIEWS)) {
    byId(`view-${view}`).hidden = view !== name;
    const tab = byId(`tab-${view}`);
    if (view === name) {
      tab.setAttribute('aria-current', 'page');
    } else {
      tab.removeAttribute('aria-current');
    }
  }
  poll();
}

function status(text, className) {
  const node = byId('status');
  node.textContent = text;
  node.className = className || '';
}

// Asks for the token: what was shown is taken away, so that a refused token sees nothing.
function refused(why) {
  for (const view of Object.values(VIEWS)) {
    view.clear();
  }
  byId('views').hidden = true;
  byId('login').hidden = false;
  byId('login-why').textContent = why.message;
  byId('login-why').className = why.sent ? 'error' : '';
  byId('forget').hidden = true;
  status(why.sent ? 'token refused' : 'token needed', 'error');
}

async function poll() {
  clearTimeout(timer);
  const mine = ++round;
  const name = current();
  try {
    await VIEWS[name].refresh();
    if (mine !== round) return;
    byId('views').hidden = false;
    byId('login').hidden = true;
    byId('forget').hidden = !token();
    status(`updated ${clock(Date.now())}`, 'ok');
    if (performance.getEntriesByName('distlock-ready').length === 0) {
      performance.mark('distlock-ready');
    }
    document.body.dataset.ready = name;
  } catch (err) {
    if (mine !== round) return;
    if (err instanceof Unauthorized) {
      refused(err);
      return;
    }
    status(err.message || 'the server cannot be reached', 'error');
  }
  timer = setTimeout(poll, EVERY);
}

byId('login').addEventListener('submit', (event) => {
  event.preventDefault();
  const secret = byId('token').value.trim();
  if (secret) {
    keepToken(secret);
    byId('token').value = '';
    poll();
  }
});

byId('forget').addEventListener('click', () => {
  forgetToken();
  poll();
});

for (const view of Object.values(VIEWS)) {
  if (view.watch) {
    view.watch(() => poll());
  }
}

window.addEventListener('hashchange', show);
show();
