// Ray's label selectors, with the semantics of ray_accel_ext.placement.match_selector (Python):
// "value", "!value", "in(v1,v2)", "!in(v1,v2)"; a "!" selector on a node without the key matches
// (Ray 2.60, python/ray/_private/label_utils.py; measured in reference/ray-2.60.md section 6).

// Python's str.strip() removes what str.isspace() calls whitespace; String.prototype.trim()
// differs (it strips U+FEFF, keeps U+001C-U+001F and U+0085), so the two agree only this way.
const PY_SPACE = "[\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
const PY_STRIP = new RegExp("^" + PY_SPACE + "+|" + PY_SPACE + "+$", "g");

export function pyStrip(text) {
  return text.replace(PY_STRIP, "");
}

export class SelectorError extends Error {}

function own(obj, key) {
  return Object.prototype.hasOwnProperty.call(obj, key) ? obj[key] : undefined;
}

/** [[key, negate, Set(values)], ...] of a selector object; throws SelectorError like Python's ValueError. */
export function compileSelector(selector) {
  const out = [];
  for (const key of Object.keys(selector)) {
    const raw = selector[key];
    if (typeof raw !== "string") throw new SelectorError(`selector values are strings (Ray's Dict[str, str]); ${key} is ${JSON.stringify(raw)}`);
    let expr = pyStrip(raw);
    const negate = expr.startsWith("!");
    if (negate) expr = expr.slice(1);
    let values;
    if (expr.startsWith("in(") && expr.endsWith(")")) {
      values = new Set(expr.slice(3, -1).split(",").map(pyStrip).filter(v => v));
      if (!values.size) throw new SelectorError(`invalid label selector value ${JSON.stringify(raw)} for ${JSON.stringify(key)}`);
    } else {
      values = new Set([expr]);
    }
    out.push([key, negate, values]);
  }
  return out;
}

export function matchCompiled(labels, compiled) {
  for (const [key, negate, values] of compiled) {
    const value = own(labels, key);
    const present = typeof value === "string" && values.has(value);
    if (present === negate) return false;
  }
  return true;
}

/** Whether node labels match a selector object, as Ray matches it. */
export function matchSelector(labels, selector) {
  return matchCompiled(labels, compileSelector(selector));
}

const TERM = /([^\s=;]+)\s*=\s*(!?in\([^)]*\)|[^\s;]*)/g;

/**
 * The filter box: a JSON object (Ray's dict form), `key=expr` terms separated by spaces or ";"
 * (`ray.io/accelerator-type=in(H100,H200) rayaccel.io/rack=!r1`), or plain text searched in
 * host names, node ids, domain ids and SKUs. Returns {kind: "all"|"selector"|"text", ...}.
 */
export function parseFilter(text) {
  const t = text.trim();
  if (!t) return {kind: "all"};
  if (t.startsWith("{")) {
    let obj;
    try { obj = JSON.parse(t); } catch (e) { throw new SelectorError("not a JSON object: " + e.message); }
    if (obj === null || typeof obj !== "object" || Array.isArray(obj)) throw new SelectorError("a selector is a JSON object of label key to expression");
    return {kind: "selector", selector: obj, compiled: compileSelector(obj)};
  }
  if (t.includes("=")) {
    const selector = {};
    let rest = t;
    for (const m of t.matchAll(TERM)) {
      selector[m[1]] = m[2];
      rest = rest.replace(m[0], "");
    }
    if (rest.replace(/[\s;]/g, "")) throw new SelectorError(`cannot read ${JSON.stringify(rest.trim())}: write key=value, key=!value, key=in(a,b)`);
    return {kind: "selector", selector, compiled: compileSelector(selector)};
  }
  return {kind: "text", text: t.toLowerCase()};
}
