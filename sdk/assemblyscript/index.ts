// Kube32 pod SDK for AssemblyScript: hides the pod ABI (docs/writing-pods.md, pod-abi.md).
//
// A pod's entry file exports the ABI functions it implements and builds them from this library:
//
//   import { Request, Response, handle, log } from "../../sdk/assemblyscript/index";
//   export { k32_alloc } from "../../sdk/assemblyscript/index";
//   export function k32_handle(ptr: i32, len: i32): i64 {
//     return handle(ptr, len, (req: Request): Response => Response.text(200, "hello\n"));
//   }
//
// Build with: asc pod.ts -o pod.wasm -O --runtime incremental --use abort=sdk/assemblyscript/index/k32_abort
// (the abort hook turns an AssemblyScript abort into a log line and a trap, without an env import).

// ---- imports of module "k32" (pod-abi.md, "Imports the node provides")

@external("k32", "k32_time_ms") declare function _time_ms(): i64;
@external("k32", "k32_log") declare function _log(ptr: usize, len: i32): void;
@external("k32", "k32_env") declare function _env(kp: usize, kl: i32, bp: usize, bl: i32): i32;
@external("k32", "k32_asset") declare function _asset(np: usize, nl: i32, bp: usize, bl: i32): i32;
@external("k32", "kube32_channel_open") declare function _channel_open(np: usize, nl: i32): i32;
@external("k32", "k32_channel_send") declare function _channel_send(h: i32, p: usize, l: i32): i32;
@external("k32", "k32_fs_open") declare function _fs_open(pp: usize, pl: i32, flags: i32): i32;
@external("k32", "k32_fs_read") declare function _fs_read(fd: i32, p: usize, l: i32): i32;
@external("k32", "k32_fs_write") declare function _fs_write(fd: i32, p: usize, l: i32): i32;
@external("k32", "k32_fs_close") declare function _fs_close(fd: i32): i32;

// ---- small helpers

function utf8(s: string): ArrayBuffer {
  return String.UTF8.encode(s);
}

/** The pod's clock: ms since the pod first started; carries over a move and never goes backward. */
export function timeMs(): i64 {
  return _time_ms();
}

/** Appends one line to the container's log (`kubectl logs`). */
export function log(line: string): void {
  const b = utf8(line);
  _log(changetype<usize>(b), b.byteLength);
}

/** The AssemblyScript abort hook (see the build line above): logs where it failed, then traps. */
export function k32_abort(message: string | null, file: string | null, line: u32, column: u32): void {
  let m = "";
  if (message !== null) m = message;
  let f = "?";
  if (file !== null) f = file;
  log("abort: " + m + " at " + f + ":" + line.toString() + ":" + column.toString());
  unreachable();
}

function lookup(name: string, isAsset: bool): ArrayBuffer | null {
  const k = utf8(name);
  let buf = new ArrayBuffer(256);
  let n = isAsset
    ? _asset(changetype<usize>(k), k.byteLength, changetype<usize>(buf), buf.byteLength)
    : _env(changetype<usize>(k), k.byteLength, changetype<usize>(buf), buf.byteLength);
  if (n < 0) return null;
  if (n > buf.byteLength) {
    buf = new ArrayBuffer(n);
    n = isAsset
      ? _asset(changetype<usize>(k), k.byteLength, changetype<usize>(buf), buf.byteLength)
      : _env(changetype<usize>(k), k.byteLength, changetype<usize>(buf), buf.byteLength);
  }
  return buf.slice(0, n);
}

/** The value of an environment variable of the container spec, or null. */
export function env(key: string): string | null {
  const b = lookup(key, false);
  if (b === null) return null;
  return String.UTF8.decode(b);
}

/** An asset of the pod spec (a key of a ConfigMap volume), or null. */
export function asset(name: string): ArrayBuffer | null {
  return lookup(name, true);
}

// ---- channels

/** A channel to a topic: messages go to every pod subscribed to it in the namespace. */
export class Channel {
  constructor(public readonly handle: i32, public readonly topic: string) {}

  /** Opens the channel to `topic` (the same topic gives the same handle); null for an empty or over-long name. */
  static open(topic: string): Channel | null {
    const b = utf8(topic);
    const h = _channel_open(changetype<usize>(b), b.byteLength);
    return h < 0 ? null : new Channel(h, topic);
  }

  /** Publishes bytes (at most 4 KiB); false when refused. */
  send(payload: ArrayBuffer): bool {
    return _channel_send(this.handle, changetype<usize>(payload), payload.byteLength) == 0;
  }

  /** Publishes a string as UTF-8. */
  sendText(text: string): bool {
    return this.send(utf8(text));
  }
}

// ---- files in the pod's own storage on the node

/** A file in the pod's storage. Close it before the call returns: an open file keeps the pod from moving. */
export class File {
  constructor(public readonly fd: i32) {}

  /** Opens `path` for reading (mode 0), writing (1, create and truncate) or appending (2); a negative errno on failure. */
  static open(path: string, mode: i32): i32 {
    const b = utf8(path);
    return _fs_open(changetype<usize>(b), b.byteLength, mode);
  }

  /** Reads up to `max` bytes; null on error. */
  read(max: i32): ArrayBuffer | null {
    const buf = new ArrayBuffer(max);
    const n = _fs_read(this.fd, changetype<usize>(buf), max);
    return n < 0 ? null : buf.slice(0, n);
  }

  /** Writes bytes; the count written or a negative errno. */
  write(data: ArrayBuffer): i32 {
    return _fs_write(this.fd, changetype<usize>(data), data.byteLength);
  }

  /** Closes the file; 0 or a negative errno. */
  close(): i32 {
    return _fs_close(this.fd);
  }

  /** Reads a whole file as text; null when it cannot be opened. */
  static readText(path: string): string | null {
    const fd = File.open(path, 0);
    if (fd < 0) return null;
    const f = new File(fd);
    let out = "";
    for (;;) {
      const b = f.read(4096);
      if (!b || b.byteLength == 0) break;
      out += String.UTF8.decode(b!);
    }
    f.close();
    return out;
  }

  /** Writes a whole file (mode 1 replaces, 2 appends); false on error. */
  static writeText(path: string, text: string, mode: i32 = 1): bool {
    const fd = File.open(path, mode);
    if (fd < 0) return false;
    const f = new File(fd);
    const ok = f.write(utf8(text)) >= 0;
    return f.close() == 0 && ok;
  }
}

// ---- memory for the node's inputs

/** Gives the node room for a request or an event (pod-abi.md, k32_alloc). Export it from the pod's entry file. */
export function k32_alloc(size: i32): i32 {
  return <i32>heap.alloc(<usize>max(size, 1));
}

let lastResponse: usize = 0;

// ---- HTTP

/** An HTTP request as the node passes it: header names in lower case, the body whole. */
export class Request {
  method: string = "";
  /** The request target: path and query, as `/counter?x=1`. */
  target: string = "";
  headerNames: string[] = [];
  headerValues: string[] = [];
  body: ArrayBuffer = new ArrayBuffer(0);

  /** The path, without the query. */
  get path(): string {
    const q = this.target.indexOf("?");
    return q < 0 ? this.target : this.target.substring(0, q);
  }

  /** A header's value (name in lower case), or null. */
  header(name: string): string | null {
    for (let i = 0; i < this.headerNames.length; i++) if (this.headerNames[i] == name) return this.headerValues[i];
    return null;
  }

  /** The body as UTF-8 text. */
  text(): string {
    return String.UTF8.decode(this.body);
  }

  /** Parses the raw message at `ptr`, `len` bytes. */
  static parse(ptr: usize, len: i32): Request {
    const r = new Request();
    // Find the end of the head (CRLFCRLF).
    let headEnd = -1;
    for (let i = 0; i + 3 < len; i++) {
      if (load<u8>(ptr + i) == 13 && load<u8>(ptr + i + 1) == 10 && load<u8>(ptr + i + 2) == 13 && load<u8>(ptr + i + 3) == 10) {
        headEnd = i;
        break;
      }
    }
    if (headEnd < 0) headEnd = len;
    const head = String.UTF8.decodeUnsafe(ptr, headEnd);
    const lines = head.split("\r\n");
    const first = lines[0].split(" ");
    if (first.length > 0) r.method = first[0];
    if (first.length > 1) r.target = first[1];
    for (let i = 1; i < lines.length; i++) {
      const c = lines[i].indexOf(":");
      if (c <= 0) continue;
      r.headerNames.push(lines[i].substring(0, c));
      r.headerValues.push(lines[i].substring(c + 1).trim());
    }
    const bodyStart = headEnd + 4;
    if (bodyStart < len) {
      const body = new ArrayBuffer(len - bodyStart);
      memory.copy(changetype<usize>(body), ptr + bodyStart, len - bodyStart);
      r.body = body;
    }
    return r;
  }
}

/** An HTTP response the pod answers. */
export class Response {
  headerNames: string[] = [];
  headerValues: string[] = [];
  constructor(public status: i32, public body: ArrayBuffer = new ArrayBuffer(0)) {}

  /** A response with a text body (`text/plain; charset=utf-8`). */
  static text(status: i32, text: string): Response {
    return new Response(status, utf8(text)).set("content-type", "text/plain; charset=utf-8");
  }

  /** A response with a JSON body (the caller writes the JSON). */
  static json(status: i32, json: string): Response {
    return new Response(status, utf8(json)).set("content-type", "application/json");
  }

  /** Adds a header. */
  set(name: string, value: string): Response {
    this.headerNames.push(name);
    this.headerValues.push(value);
    return this;
  }

  /** The message bytes: status line, headers, content-length, empty line, body. */
  encode(): ArrayBuffer {
    let head = "HTTP/1.1 " + this.status.toString() + " " + reason(this.status) + "\r\n";
    for (let i = 0; i < this.headerNames.length; i++) head += this.headerNames[i] + ": " + this.headerValues[i] + "\r\n";
    head += "content-length: " + this.body.byteLength.toString() + "\r\n\r\n";
    const h = utf8(head);
    const out = new ArrayBuffer(h.byteLength + this.body.byteLength);
    memory.copy(changetype<usize>(out), changetype<usize>(h), h.byteLength);
    memory.copy(changetype<usize>(out) + h.byteLength, changetype<usize>(this.body), this.body.byteLength);
    return out;
  }
}

function reason(status: i32): string {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

/**
 * Runs a request handler for `k32_handle(ptr, len)`: parses the request, frees its buffer, calls
 * `handler`, and returns the packed response (low 32 bits the pointer, high 32 the length). The
 * response stays valid until the next call.
 */
export function handle(ptr: i32, len: i32, handler: (req: Request) => Response): i64 {
  const req = Request.parse(<usize>ptr, len);
  heap.free(<usize>ptr);
  if (lastResponse != 0) {
    heap.free(lastResponse);
    lastResponse = 0;
  }
  const bytes = handler(req).encode();
  const n = bytes.byteLength;
  const out = heap.alloc(<usize>max(n, 1));
  memory.copy(out, changetype<usize>(bytes), n);
  lastResponse = out;
  return (<i64>n << 32) | <i64>(<u32>out);
}

/** An event on a subscribed topic, or a message sent on its channel. */
export class Event {
  constructor(public topic: string, public payload: ArrayBuffer) {}

  /** The payload as UTF-8 text. */
  text(): string {
    return String.UTF8.decode(this.payload);
  }

  /** Reads `k32_event`'s arguments and frees the node's buffer (one k32_alloc holds both). */
  static read(topicPtr: i32, topicLen: i32, payloadPtr: i32, payloadLen: i32): Event {
    const topic = String.UTF8.decodeUnsafe(<usize>topicPtr, topicLen);
    const payload = new ArrayBuffer(payloadLen);
    memory.copy(changetype<usize>(payload), <usize>payloadPtr, payloadLen);
    heap.free(<usize>topicPtr);
    return new Event(topic, payload);
  }
}
