// Reading the server's API: the token kept in this tab only (sessionStorage), sent as
// `Authorization: Bearer`, never in a URL or a cookie; the server's clock, from its `Date`
// header, so that ages and times left do not depend on this machine's clock.

const KEY = 'distlock-token';

export function token() {
  return sessionStorage.getItem(KEY);
}

export function keepToken(secret) {
  sessionStorage.setItem(KEY, secret);
}

export function forgetToken() {
  sessionStorage.removeItem(KEY);
}

// A request refused for its token (401): none was given, or the server does not know it.
export class Unauthorized extends Error {
  constructor(sent) {
    super(sent ? 'The server does not know this token.' : 'This server needs a token.');
    this.sent = sent;
  }
}

// How far the server's clock is ahead of this one, in ms; counted only past 2 s, as the
// `Date` header is in whole seconds.
let skew = 0;

export function now() {
  return Date.now() + skew;
}

async function get(path) {
  const headers = { Accept: 'application/json' };
  const secret = token();
  if (secret) {
    headers.Authorization = `Bearer ${secret}`;
  }
  const answer = await fetch(path, { headers, cache: 'no-store', credentials: 'omit' });
  const date = Date.parse(answer.headers.get('Date') || '');
  if (!Number.isNaN(date)) {
    const ahead = date - Date.now();
    skew = Math.abs(ahead) > 2000 ? ahead : 0;
  }
  if (answer.status === 401) {
    throw new Unauthorized(Boolean(secret));
  }
  if (!answer.ok) {
    let detail = `${answer.status}`;
    try {
      const problem = await answer.json();
      detail = problem.detail || problem.title || detail;
    } catch (_) {
      // Not a problem document: the status says it.
    }
    throw new Error(`${path.split('?')[0]}: ${detail}`);
  }
  return answer;
}

export async function json(path) {
  return (await get(path)).json();
}

export async function text(path) {
  return (await get(path)).text();
}

// An NDJSON answer (`GET /log`), one object per line.
export async function lines(path) {
  const body = await text(path);
  return body.split('\n').filter((line) => line.trim() !== '').map((line) => JSON.parse(line));
}

export function query(params) {
  const pairs = Object.entries(params)
    .filter(([, value]) => value !== undefined && value !== null)
    .map(([key, value]) => `${encodeURIComponent(key)}=${encodeURIComponent(value)}`);
  return pairs.length ? `?${pairs.join('&')}` : '';
}
