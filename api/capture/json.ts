// JSON.parse that gives other requests a turn. A 20 MB batch (the /batch limit, reached from a
// 30 KB gzip or lz64 body) takes JSON.parse 0.7–4 s on our machines, all of it with the event loop
// stopped. Here a big text is parsed piece by piece: every value of at most `smallChars` goes to
// JSON.parse whole (a few milliseconds); only the containers larger than that are walked here, and
// the walk yields every few milliseconds. The result is the same as JSON.parse's, errors included.
// The price: about twice JSON.parse's time in all for such a text (two extra linear scans).
//
// Pass 1 finds the big containers (open → close position) in one linear scan; pass 2 builds them,
// iteratively, handing every smaller value to JSON.parse.
import { slicer } from './turns.ts';

/** Deeper payloads are refused whole: pass 1 keeps a stack of this many positions at most. */
export const MAX_NESTING = 100_000;

export class JsonTooDeep extends Error {
  constructor() {
    super(`JSON nested more than ${MAX_NESTING} levels deep`);
  }
}

const QUOTE = 34;
const BACKSLASH = 92;
const COMMA = 44;
const COLON = 58;
const OPEN_BRACE = 123;
const CLOSE_BRACE = 125;
const OPEN_BRACKET = 91;
const CLOSE_BRACKET = 93;

const isSpace = (c: number) => c === 32 || c === 10 || c === 13 || c === 9;

/** Pass 1: containers whose text is longer than `smallChars`, by open position → close position. */
async function bigContainers(
  text: string,
  smallChars: number,
  pause: () => Promise<void>,
): Promise<Map<number, number>> {
  const big = new Map<number, number>();
  const open: number[] = [];
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    if ((i & 0xffff) === 0) await pause();
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) {
      inString = true;
    } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      if (open.length === MAX_NESTING) throw new JsonTooDeep();
      open.push(i);
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      const start = open.pop();
      if (start === undefined) throw new SyntaxError(`Unexpected '${text[i]}' at position ${i}`);
      if (i - start + 1 > smallChars) big.set(start, i);
    }
  }
  // Unterminated: refused here, before pass 2 would hand the whole open container to JSON.parse.
  if (inString || open.length > 0) throw new SyntaxError('Unexpected end of JSON input');
  return big;
}

/** The position just after the value starting at `start` (a value pass 1 found small, or a primitive). */
function endOfValue(text: string, start: number): number {
  const first = text.charCodeAt(start);
  if (first === QUOTE) {
    for (let i = start + 1; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) return i + 1;
    }
    return text.length;
  }
  if (first === OPEN_BRACE || first === OPEN_BRACKET) {
    let depth = 0;
    let inString = false;
    for (let i = start; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (inString) {
        if (c === BACKSLASH) i++;
        else if (c === QUOTE) inString = false;
      } else if (c === QUOTE) inString = true;
      else if (c === OPEN_BRACE || c === OPEN_BRACKET) depth++;
      else if ((c === CLOSE_BRACE || c === CLOSE_BRACKET) && --depth === 0) return i + 1;
    }
    return text.length;
  }
  let i = start;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === COMMA || c === CLOSE_BRACE || c === CLOSE_BRACKET || c === COLON || isSpace(c)) break;
    i++;
  }
  return i;
}

interface Frame {
  value: unknown[] | Record<string, unknown>;
  close: number;
  /** The key the next value goes under (objects). */
  key: string;
}

/** Parses `text` as JSON.parse does, yielding to the event loop every few milliseconds. */
export async function parseJsonYielding(text: string, options: { smallChars?: number } = {}): Promise<unknown> {
  const smallChars = options.smallChars ?? 256 * 1024;
  if (text.length <= smallChars) return JSON.parse(text);
  const pause = slicer();
  const big = await bigContainers(text, smallChars, pause);
  const fail = (at: number): never => {
    throw new SyntaxError(
      at < text.length ? `Unexpected '${text[at]}' in JSON at position ${at}` : 'Unexpected end of JSON input',
    );
  };

  let pos = 0;
  const skipSpace = () => {
    while (pos < text.length && isSpace(text.charCodeAt(pos))) pos++;
  };
  const stack: Frame[] = [];
  let result: unknown;
  // defineProperty, as JSON.parse does: "__proto__" stays a plain key.
  const define = (object: Record<string, unknown>, key: string, value: unknown) =>
    Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });
  const attach = (value: unknown) => {
    const top = stack[stack.length - 1];
    if (!top) result = value;
    else if (Array.isArray(top.value)) top.value.push(value);
    else define(top.value, top.key, value);
  };
  const open = (close: number) => {
    stack.push({ value: text.charCodeAt(pos) === OPEN_BRACKET ? [] : {}, close, key: '' });
    pos++;
  };

  /**
   * From an element's start: as many whole small elements as fit in `smallChars`, parsed by one
   * JSON.parse. False when not even one could be taken (a big value, or a malformed element).
   */
  const smallRun = (frame: Frame): boolean => {
    const isArray = Array.isArray(frame.value);
    const start = pos;
    let end = start;
    for (;;) {
      const elementStart = pos;
      if (!isArray) {
        if (text.charCodeAt(pos) !== QUOTE) break;
        pos = endOfValue(text, pos);
        skipSpace();
        if (text.charCodeAt(pos) !== COLON) break;
        pos++;
        skipSpace();
      }
      const valueEnd = big.has(pos) ? pos : endOfValue(text, pos);
      if (valueEnd === pos) {
        pos = elementStart;
        break;
      }
      pos = end = valueEnd;
      skipSpace();
      if (text.charCodeAt(pos) !== COMMA || end - start >= smallChars) break;
      pos++;
      skipSpace();
    }
    pos = end;
    if (end === start) return false;
    const slice = text.slice(start, end);
    if (isArray) {
      for (const value of JSON.parse(`[${slice}]`) as unknown[]) (frame.value as unknown[]).push(value);
    } else {
      const parsed = JSON.parse(`{${slice}}`) as Record<string, unknown>;
      for (const key of Object.keys(parsed)) define(frame.value as Record<string, unknown>, key, parsed[key]);
    }
    return true;
  };

  skipSpace();
  const topClose = big.get(pos);
  if (topClose === undefined) {
    const end = endOfValue(text, pos);
    if (end === pos) fail(pos);
    result = JSON.parse(text.slice(pos, end));
    pos = end;
  } else {
    open(topClose);
    let fresh = true; // just inside a container: it may be empty
    let afterElement = false;
    while (stack.length > 0) {
      await pause();
      const top = stack[stack.length - 1];
      skipSpace();
      const c = text.charCodeAt(pos);
      if (afterElement || fresh) {
        if (pos === top.close) {
          if (c !== (Array.isArray(top.value) ? CLOSE_BRACKET : CLOSE_BRACE)) fail(pos);
          pos++;
          stack.pop();
          attach(top.value);
          fresh = false;
          afterElement = true;
          continue;
        }
        if (afterElement) {
          if (c !== COMMA) fail(pos);
          pos++;
          skipSpace();
          if (pos === top.close) fail(pos); // a trailing comma
        }
      }
      fresh = false;
      afterElement = true;
      if (smallRun(top)) continue;
      // One element whose value is a big container (or a malformed one, which fails here).
      if (!Array.isArray(top.value)) {
        if (text.charCodeAt(pos) !== QUOTE) fail(pos);
        const keyEnd = endOfValue(text, pos);
        top.key = JSON.parse(text.slice(pos, keyEnd)) as string;
        pos = keyEnd;
        skipSpace();
        if (text.charCodeAt(pos) !== COLON) fail(pos);
        pos++;
        skipSpace();
      }
      const close = big.get(pos);
      if (close === undefined) fail(pos);
      open(close!);
      fresh = true;
      afterElement = false;
    }
  }
  skipSpace();
  if (pos !== text.length) fail(pos);
  return result;
}
