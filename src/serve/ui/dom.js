// Building the page's elements. Every name, owner, note and reason is set as text
// (textContent, or an SVG text node): nothing the server sends is ever read as markup.

const SVG = 'http://www.w3.org/2000/svg';

// An element with its attributes, class and text or children.
export function el(tag, options = {}, children = []) {
  const node = document.createElement(tag);
  build(node, options, children);
  return node;
}

export function svg(tag, options = {}, children = []) {
  const node = document.createElementNS(SVG, tag);
  build(node, options, children);
  return node;
}

function build(node, options, children) {
  const { text, className, attrs } = options;
  if (className) {
    node.setAttribute('class', className);
  }
  for (const [name, value] of Object.entries(attrs || {})) {
    node.setAttribute(name, String(value));
  }
  if (text !== undefined && text !== null) {
    node.textContent = String(text);
  }
  for (const child of children) {
    if (child) {
      node.append(child);
    }
  }
}

export function byId(id) {
  return document.getElementById(id);
}

// A duration in ms as people read it: 42s, 3m 12s, 2h 5m, 3d 4h.
export function duration(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

// A lock's or a waiter's mode, from the fields of its object.
export function mode(object) {
  if (object.shared) return 'shared';
  if (object.limit) return `limit ${object.limit}`;
  return 'exclusive';
}

export function clock(ms) {
  const at = new Date(ms);
  const two = (n) => String(n).padStart(2, '0');
  return `${two(at.getHours())}:${two(at.getMinutes())}:${two(at.getSeconds())}`;
}

/** A name, owner, note or reason set apart from the text around it (Unicode's first-strong
 * isolate … pop directional isolate), so that right-to-left marks or overrides inside it
 * cannot reorder the page's own words beside it. */
export function iso(text) {
  return `\u2068${text}\u2069`;
}
