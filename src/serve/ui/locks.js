// Locks now: every live tenure the token may read (`GET /locks?prefix=`), with its mode (and
// how many hold a shared or counted resource), owner, token, note, fence, age and time left.

import { json, now, query } from './api.js';
import { byId, duration, el, mode } from './dom.js';

const prefix = byId('locks-prefix');
const sort = byId('locks-sort');

export function watch(refresh) {
  prefix.addEventListener('input', refresh);
  sort.addEventListener('change', refresh);
}

export async function refresh() {
  const answer = await json(`/locks${query({ prefix: prefix.value })}`);
  render(answer.locks);
}

export function clear() {
  render([]);
}

function render(locks) {
  const held = new Map();
  for (const lock of locks) {
    held.set(lock.resource, (held.get(lock.resource) || 0) + 1);
  }
  const at = now();
  const rows = [...locks];
  if (sort.value === 'age') {
    rows.sort((a, b) => Date.parse(a.acquired_at) - Date.parse(b.acquired_at) || a.fence - b.fence);
  }
  const cell = (label, text, className) => el('td', { text, className, attrs: { 'data-label': label } });
  byId('locks-rows').replaceChildren(...rows.map((lock) => {
    let shown = mode(lock);
    if (lock.shared || lock.limit) {
      shown += ` (${held.get(lock.resource)} held)`;
    }
    const row = el('tr', {}, [
      cell('Resource', lock.resource, 'name'),
      cell('Mode', shown),
      cell('Owner', lock.owner, 'name'),
      cell('Token', lock.token || '', 'name'),
      cell('Note', lock.note || '', 'note'),
      cell('Fence', lock.fence, 'number'),
      cell('Age', duration(at - Date.parse(lock.acquired_at)), 'number'),
      cell('Left', duration(Date.parse(lock.expires_at) - at), 'number'),
    ]);
    row.dataset.resource = lock.resource;
    return row;
  }));
  byId('locks-empty').hidden = locks.length > 0;
  byId('locks-count').textContent = locks.length === 1 ? '1 live lock' : `${locks.length} live locks`;
}
