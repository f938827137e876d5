// Health: the store's kind and whether it answers, the requests waiting now, the live tenures,
// and the request rates, from `GET /metrics` (which names the store by its kind only: no path,
// host or credentials). A rate is the change of a counter over the last ten seconds or so.

import { text } from './api.js';
import { byId, el } from './dom.js';

const WINDOW = 10000;
const samples = [];

export async function refresh() {
  const metrics = parse(await text('/metrics'));
  const at = performance.now();
  samples.push({ at, counts: metrics.requests });
  while (samples.length > 2 && at - samples[1].at >= WINDOW) {
    samples.shift();
  }
  render(metrics, samples[0], at);
}

export function clear() {
  samples.length = 0;
  byId('health-facts').replaceChildren();
  byId('health-rows').replaceChildren();
}

// The Prometheus text format's lines that the page shows.
function parse(body) {
  const found = { requests: new Map(), values: new Map() };
  for (const line of body.split('\n')) {
    if (line.startsWith('#') || line.trim() === '') continue;
    const match = /^([a-z_]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) continue;
    const [, name, labels, value] = match;
    const label = (key) => {
      const hit = new RegExp(`${key}="((?:[^"\\\\]|\\\\.)*)"`).exec(labels || '');
      return hit ? hit[1] : '';
    };
    if (name === 'distlock_requests_total') {
      found.requests.set(`${label('route')}\u0000${label('status')}`, Number(value));
    } else if (name === 'distlock_store_info') {
      found.values.set('store', label('kind'));
    } else {
      found.values.set(name, Number(value));
    }
  }
  return found;
}

function render(metrics, first, at) {
  const values = metrics.values;
  const kinds = { sqlite: 'SQLite', postgresql: 'PostgreSQL', server: 'a distlock server' };
  const up = values.get('distlock_store_up');
  const facts = [
    ['Store', kinds[values.get('store')] || 'unknown'],
    ['Store answers', up === undefined ? 'unknown' : up === 1 ? 'yes' : 'no'],
    ['Waiting requests', values.get('distlock_waiting_requests') ?? 0],
    ['Live tenures', values.has('distlock_live_tenures') ? values.get('distlock_live_tenures') : 'unknown'],
  ];
  byId('health-facts').replaceChildren(...facts.flatMap(([term, value]) => [
    el('dt', { text: term }),
    el('dd', { text: value }),
  ]));
  const seconds = (at - first.at) / 1000;
  const rows = [...metrics.requests.entries()].sort(([a], [b]) => (a < b ? -1 : 1));
  byId('health-rows').replaceChildren(...rows.map(([key, total]) => {
    const [route, status] = key.split('\u0000');
    const before = first.counts.get(key) ?? 0;
    const rate = seconds > 0 ? (total - before) / seconds : 0;
    return el('tr', {}, [
      el('td', { text: route, attrs: { 'data-label': 'Route' } }),
      el('td', { text: status, attrs: { 'data-label': 'Status' } }),
      el('td', { text: total, className: 'number', attrs: { 'data-label': 'Total' } }),
      el('td', { text: rate.toFixed(1), className: 'number', attrs: { 'data-label': 'Per second' } }),
    ]);
  }));
}
