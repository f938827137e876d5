// Queues: for each resource with waiters (`GET /queues?prefix=`), the waiters in order, how
// long each has waited and its mode; a lock set's waiter names every member it waits for.

import { json, now, query } from './api.js';
import { byId, duration, el, iso, mode } from './dom.js';

const prefix = byId('queues-prefix');

export function watch(refresh) {
  prefix.addEventListener('input', refresh);
}

export async function refresh() {
  const answer = await json(`/queues${query({ prefix: prefix.value })}`);
  render(answer.queues);
}

export function clear() {
  render([]);
}

function render(queues) {
  const at = now();
  let waiting = 0;
  byId('queues-list').replaceChildren(...queues.map((queue) => {
    waiting += queue.waiters.length;
    const items = queue.waiters.map((waiter) => {
      const facts = [mode(waiter)];
      if (waiter.since) {
        facts.push(`waiting ${duration(at - Date.parse(waiter.since))}`);
      }
      const item = el('li', { className: 'waiter' }, [
        el('span', { className: 'name owner', text: waiter.owner }),
        waiter.token ? el('span', { className: 'token', text: `token ${iso(waiter.token)}` }) : null,
        el('span', { className: 'waited', text: facts.join(' · ') }),
        waiter.members && waiter.members.length
          ? el('span', { className: 'members' }, [
            el('span', { text: 'a set of ' }),
            ...waiter.members.map((member) => el('span', { className: 'name member', text: member })),
          ])
          : null,
      ]);
      item.dataset.owner = waiter.owner;
      return item;
    });
    const card = el('article', { className: 'queue' }, [
      el('h3', { className: 'name', text: queue.resource }),
      el('ol', {}, items),
    ]);
    card.dataset.resource = queue.resource;
    return card;
  }));
  byId('queues-empty').hidden = queues.length > 0;
  byId('queues-count').textContent = `${waiting} waiting on ${queues.length} resource${queues.length === 1 ? '' : 's'}`;
}
