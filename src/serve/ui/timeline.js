// The timeline: for one resource or the resources under a prefix, the tenures of the last
// hours (`GET /log?since=…`, with the live ones from `GET /locks`) as bars on a time axis, in
// SVG. A break is marked with who broke it and why; a lease kept by `run --hold-at-least`
// after its command ended is drawn hatched until the hold's end.

import { json, lines, now, query } from './api.js';
import { byId, clock, el, iso, mode, svg } from './dom.js';

const kind = byId('timeline-kind');
const target = byId('timeline-target');
const hours = byId('timeline-hours');

const LANE = 26;
const AXIS = 26;
const STEPS = [1, 2, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600].map((s) => s * 1000);

export function watch(refresh) {
  kind.addEventListener('change', refresh);
  target.addEventListener('input', refresh);
  hours.addEventListener('change', refresh);
}

export async function refresh() {
  const span = Number(hours.value) * 3600000;
  const named = target.value;
  const exact = kind.value === 'resource' && named !== '';
  const read = { since: `${hours.value}h`, limit: 20000 };
  if (exact) {
    read.resource = named;
  } else if (named !== '') {
    read.prefix = named;
  }
  const [events, listed] = await Promise.all([
    lines(`/log${query(read)}`),
    json(`/locks${query({ prefix: named })}`),
  ]);
  const live = listed.locks.filter((lock) => !exact || lock.resource === named);
  const end = now();
  const all = tenures(events, live, end - span, end);
  // The axis begins a little before the first tenure shown, within the hours chosen.
  const first = Math.min(end - 10000, ...all.map((tenure) => tenure.start));
  render(all, Math.max(end - span, first - Math.max(5000, (end - first) * 0.05)), end);
}

export function clear() {
  const end = now();
  render([], end - 3600000, end);
}

// The tenures the events and the live locks tell of, each with its start and end in ms, how
// it ended, and when it was kept or broken.
function tenures(events, live, start, end) {
  const found = new Map();
  const key = (object) => `${object.resource}\u0000${object.fence}`;
  const of = (object) => {
    let tenure = found.get(key(object));
    if (!tenure) {
      tenure = {
        resource: object.resource, fence: object.fence, owner: object.owner,
        token: object.token, mode: mode(object), note: object.note,
        start: null, end: null, how: null, kept: null, broken: null, last: start,
      };
      found.set(key(object), tenure);
    }
    return tenure;
  };
  for (const event of events) {
    const tenure = of(event);
    const at = Date.parse(event.at);
    const leaseEnd = event.expires_at ? Date.parse(event.expires_at) : null;
    tenure.last = at;
    if (event.note) tenure.note = event.note;
    switch (event.event) {
      case 'acquired':
      case 'taken_over':
        tenure.start = at;
        tenure.end = leaseEnd;
        break;
      case 'extended':
      case 'renewed':
        tenure.end = leaseEnd || tenure.end;
        break;
      case 'kept':
        tenure.kept = at;
        tenure.end = leaseEnd || tenure.end;
        break;
      case 'released':
        tenure.end = at;
        tenure.how = 'released';
        break;
      case 'broken':
        tenure.end = at;
        tenure.how = 'broken';
        tenure.broken = { at, by: event.by, byToken: event.by_token, reason: event.reason };
        break;
      default:
        break;
    }
  }
  for (const lock of live) {
    const tenure = of(lock);
    tenure.how = 'live';
    tenure.start = tenure.start ?? Math.max(start, Date.parse(lock.acquired_at));
    tenure.end = end;
  }
  const all = [...found.values()];
  for (const tenure of all) {
    tenure.start = Math.max(start, tenure.start ?? start);
    if (!tenure.how) {
      tenure.how = 'expired';
    }
    tenure.end = Math.min(end, tenure.end ?? tenure.last);
    if (tenure.end < tenure.start) tenure.end = tenure.start;
  }
  all.sort((a, b) => (a.resource < b.resource ? -1 : a.resource > b.resource ? 1 : a.start - b.start));
  return all;
}

// Each tenure's lane: one resource's tenures share lanes where they do not overlap.
function lanes(all) {
  const rows = [];
  let resource = null;
  let ends = [];
  for (const tenure of all) {
    if (tenure.resource !== resource) {
      resource = tenure.resource;
      ends = [];
    }
    let lane = ends.findIndex((laneEnd) => laneEnd <= tenure.start);
    if (lane < 0) {
      lane = ends.length;
      ends.push(0);
      rows.push({ resource, first: lane === 0 });
    }
    ends[lane] = tenure.end;
    const offset = rows.length - ends.length + lane;
    tenure.row = offset;
  }
  return rows;
}

function render(all, start, end) {
  const chart = byId('timeline-chart');
  const rows = lanes(all);
  const width = Math.max(320, chart.clientWidth || 800);
  const label = Math.min(180, Math.floor(width * 0.3));
  const plot = width - label - 8;
  const height = AXIS + Math.max(1, rows.length) * LANE + 4;
  const x = (ms) => label + ((ms - start) / (end - start)) * plot;
  const picture = svg('svg', {
    className: 'timeline',
    attrs: { width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': 'tenures over time' },
  });
  const defs = svg('defs', {}, [
    svg('pattern', { attrs: { id: 'hatch', width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' } }, [
      svg('rect', { className: 'hatch-back', attrs: { width: 6, height: 6 } }),
      svg('line', { className: 'hatch-line', attrs: { x1: 0, y1: 0, x2: 0, y2: 6 } }),
    ]),
    svg('clipPath', { attrs: { id: 'labels' } }, [svg('rect', { attrs: { x: 0, y: 0, width: label - 6, height } })]),
  ]);
  picture.append(defs);
  // The axis: a tick every step that leaves about 90 px between labels.
  const step = STEPS.find((ms) => (ms / (end - start)) * plot >= 90) || STEPS[STEPS.length - 1];
  for (let at = Math.ceil(start / step) * step; at <= end; at += step) {
    picture.append(svg('line', { className: 'tick', attrs: { x1: x(at), x2: x(at), y1: AXIS - 6, y2: height } }));
    if (x(at) < width - 60) {
      const text = step < 60000 ? clock(at) : clock(at).slice(0, 5);
      picture.append(svg('text', { className: 'tick-label', text, attrs: { x: x(at) + 3, y: AXIS - 10 } }));
    }
  }
  const names = svg('g', { attrs: { 'clip-path': 'url(#labels)' } });
  rows.forEach((row, index) => {
    if (row.first) {
      names.append(svg('text', { className: 'lane-label', text: row.resource, attrs: { x: 2, y: AXIS + index * LANE + 17 } }, [
        svg('title', { text: row.resource }),
      ]));
    }
  });
  picture.append(names);
  const breaks = [];
  for (const tenure of all) {
    const y = AXIS + tenure.row * LANE + 4;
    const from = x(tenure.start);
    const keptAt = tenure.kept ? x(Math.min(Math.max(tenure.kept, tenure.start), tenure.end)) : null;
    const to = Math.max(from + 2, x(tenure.end));
    const solidEnd = keptAt ?? to;
    const details = `${iso(tenure.resource)} · fence ${tenure.fence} · ${iso(tenure.owner)}${tenure.token ? ` (token ${iso(tenure.token)})` : ''} · ${tenure.mode} · ${clock(tenure.start)}–${clock(tenure.end)} · ${tenure.how}${tenure.note ? ` · ${iso(tenure.note)}` : ''}`;
    const bar = svg('g', { className: `tenure ${tenure.how}` }, [svg('title', { text: details })]);
    bar.append(svg('rect', { className: 'bar', attrs: { x: from, y, width: Math.max(2, solidEnd - from), height: LANE - 8, rx: 3 } }));
    if (keptAt !== null) {
      bar.append(svg('rect', { className: 'kept', attrs: { x: keptAt, y, width: Math.max(2, to - keptAt), height: LANE - 8, fill: 'url(#hatch)' } }));
    }
    if (to - from > 50) {
      bar.append(svg('text', { className: 'bar-label', text: tenure.owner, attrs: { x: from + 4, y: y + 13 } }));
    }
    if (tenure.broken) {
      const mark = x(tenure.broken.at);
      const who = tenure.broken.byToken ? `${iso(tenure.broken.by)} (token ${iso(tenure.broken.byToken)})` : iso(tenure.broken.by);
      bar.append(
        svg('line', { className: 'break-mark', attrs: { x1: mark, x2: mark, y1: y - 3, y2: y + LANE - 5 } }),
        // Beside the mark, on its left when the mark is near the chart's right edge.
        svg('text', {
          className: 'break-label',
          text: `✕ ${who}: ${iso(tenure.broken.reason)}`,
          attrs: mark > width - 240 ? { x: mark - 4, y: y + 13, 'text-anchor': 'end' } : { x: mark + 4, y: y + 13 },
        }),
      );
      breaks.push({ tenure, who });
    }
    bar.dataset.resource = tenure.resource;
    picture.append(bar);
  }
  chart.replaceChildren(picture);
  byId('timeline-empty').hidden = all.length > 0;
  byId('timeline-breaks').replaceChildren(...breaks.map(({ tenure, who }) => el('li', {}, [
    el('time', { text: clock(tenure.broken.at) }),
    el('span', { className: 'name', text: tenure.resource }),
    el('span', { text: `fence ${tenure.fence}, held by ` }),
    el('span', { className: 'name', text: tenure.owner }),
    el('span', { text: ', broken by ' }),
    el('span', { className: 'name', text: who }),
    el('span', { text: ': ' }),
    el('q', { className: 'reason', text: tenure.broken.reason }),
  ])));
}
