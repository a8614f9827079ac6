// The one way the UI talks to kvad-serve: every request goes through `request`, which sends the session's CSRF
// token on each state-changing method (the auth contract: header `x-csrf-token`), turns kvad's error objects
// ({"error": {message, param, ...}}) into `ApiError`s that say what the server said, and notices a lost session.

export class ApiError extends Error {
  status: number;
  param: string | null;
  code: string | null;
  constructor(status: number, message: string, param: string | null = null, code: string | null = null) {
    super(message);
    this.status = status;
    this.param = param;
    this.code = code;
  }
  /** A 403: the page shows that it needs an administrator. */
  get forbidden(): boolean {
    return this.status === 403;
  }
}

let csrf: string | null = null;
let onUnauthorised: () => void = () => {};

/** The token the auth layer handed out at sign-in (or in `/api/auth/me`); null while authentication is off. */
export function setCsrf(token: string | null) {
  csrf = token;
}

/** What to do when a request answers 401: the session ended, so the sign-in page shows. */
export function whenUnauthorised(f: () => void) {
  onUnauthorised = f;
}

const CHANGES = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** A fetch with the CSRF header on state-changing methods and JSON in and out. */
export async function request(path: string, init: RequestInit & { json?: unknown } = {}): Promise<Response> {
  const method = (init.method ?? (init.json !== undefined ? 'POST' : 'GET')).toUpperCase();
  const headers = new Headers(init.headers);
  if (init.json !== undefined) headers.set('content-type', 'application/json');
  if (CHANGES.has(method) && csrf) headers.set('x-csrf-token', csrf);
  const body = init.json !== undefined ? JSON.stringify(init.json) : init.body;
  const r = await fetch(path, { ...init, method, headers, body, credentials: 'same-origin' });
  if (!r.ok) throw await errorOf(r);
  return r;
}

/** Reads kvad's (and OpenAI's) error shape; anything else becomes a message with the status. */
export async function errorOf(r: Response): Promise<ApiError> {
  if (r.status === 401 && !r.url.endsWith('/api/auth/login')) onUnauthorised();
  let message = `${r.status} ${r.statusText}`;
  let param: string | null = null;
  let code: string | null = null;
  try {
    const v = await r.json();
    const e = v?.error ?? v;
    if (typeof e?.message === 'string') message = e.message;
    else if (typeof e === 'string') message = e;
    param = e?.param ?? null;
    code = e?.code ?? null;
  } catch {
    /* not JSON */
  }
  return new ApiError(r.status, message, param, code);
}

export async function getJson<T = any>(path: string): Promise<T> {
  return (await request(path)).json();
}

export async function sendJson<T = any>(path: string, json: unknown, method = 'POST'): Promise<T> {
  const r = await request(path, { method, json });
  return r.status === 204 ? (undefined as T) : r.json();
}

/** A server-sent event: its name (`message` when unnamed) and its data parsed as JSON (or the raw text). */
export interface SseEvent {
  event: string;
  data: any;
}

/**
 * POSTs `json` and yields the server-sent events of the answer as they arrive. Aborting `signal` closes the
 * connection, which is how the server learns to stop (it cancels a reply whose client went away).
 */
export async function* stream(path: string, json: unknown, signal?: AbortSignal): AsyncGenerator<SseEvent> {
  const r = await request(path, { method: 'POST', json, signal, headers: { accept: 'text/event-stream' } });
  yield* events(r);
}

/** GETs `path` and yields its server-sent events until the server ends the stream (a job's progress). */
export async function* follow(path: string, signal?: AbortSignal): AsyncGenerator<SseEvent> {
  yield* events(await request(path, { signal, headers: { accept: 'text/event-stream' } }));
}

async function* events(r: Response): AsyncGenerator<SseEvent> {
  if (!r.body) return;
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let cut: number;
    while ((cut = buf.search(/\r?\n\r?\n/)) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut).replace(/^\r?\n\r?\n/, '');
      const ev = parseBlock(block);
      if (ev) yield ev;
    }
  }
  const last = parseBlock(buf);
  if (last) yield last;
}

function parseBlock(block: string): SseEvent | null {
  let event = 'message';
  const data: string[] = [];
  for (const line of block.split(/\r?\n/)) {
    if (line.startsWith('event:')) event = line.slice(6).trim();
    else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
  }
  if (!data.length) return null;
  const text = data.join('\n');
  try {
    return { event, data: JSON.parse(text) };
  } catch {
    return { event, data: text };
  }
}

/** Prometheus' text format, as name{labels} → value. */
export function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    const v = Number(line.slice(sp + 1));
    if (sp > 0 && Number.isFinite(v)) out.set(line.slice(0, sp), v);
  }
  return out;
}
