/**
 * The guest channel's handshake (docs/feos/guest.md, "The channel"). The virtio-serial port is one
 * byte stream that outlives the host's connections to it: bytes the guest wrote for an old connection
 * may reach a new one, and bytes the host sent may wait in the port until the agent reads them. So
 * every connection starts afresh with a handshake before its HTTP/2:
 *
 *   host  -> guest   `FEOS-ATTACH <nonce>\n`        (again with a new nonce every second until answered)
 *   guest -> host    `FEOS-ATTACHED <nonce>\n`      (for the last ATTACH it read)
 *   host  -> guest   the HTTP/2 client preface `PRI * HTTP/2.0\r\n...`: from here on, one HTTP/2 connection
 *
 * The host drops every byte before the answer with its latest nonce; the guest answers every ATTACH it
 * reads before the preface and drops everything else. A guest that reads end-of-file (the host went
 * away) starts over.
 *
 * Self-contained (no imports outside node:), as the guest's initramfs carries it.
 */
import { randomBytes } from 'node:crypto';

/** What the host sends first; a nonce of 16 hex digits and a newline follow. */
export const ATTACH = 'FEOS-ATTACH ';
/** What the guest answers; the nonce and a newline follow. */
export const ATTACHED = 'FEOS-ATTACHED ';
/** The start of HTTP/2's client preface (RFC 9113, 3.4). */
export const H2_PREFACE = 'PRI * HTTP/2.0\r\n';

/** A fresh nonce: 16 lowercase hex digits. */
export function newNonce(): string {
  return randomBytes(8).toString('hex');
}

/** Result of `GuestHandshake.push`. */
export type GuestHandshakeStep =
  | { kind: 'wait'; answers: string[] }
  | { kind: 'preface'; answers: string[]; rest: Buffer };

/**
 * The guest's side: fed the bytes it reads before HTTP/2 starts, it says which ATTACHes to answer and
 * when the preface begins (with the bytes from the preface on).
 */
export class GuestHandshake {
  #buf: Buffer = Buffer.alloc(0);
  #attached = false;

  /** Forgets everything: the host went away. */
  reset(): void {
    this.#buf = Buffer.alloc(0);
    this.#attached = false;
  }

  /** Takes bytes read from the port. */
  push(chunk: Buffer): GuestHandshakeStep {
    this.#buf = this.#buf.length === 0 ? chunk : Buffer.concat([this.#buf, chunk]);
    const answers: string[] = [];
    for (;;) {
      if (this.#attached && this.#buf.length >= H2_PREFACE.length && this.#buf.subarray(0, H2_PREFACE.length).toString('latin1') === H2_PREFACE) {
        const rest = this.#buf;
        this.reset();
        return { kind: 'preface', answers, rest };
      }
      const at = this.#buf.indexOf(ATTACH, 0, 'latin1');
      if (at < 0) {
        // Keep a tail that may be the start of an ATTACH or of the preface; drop the rest.
        const keep = Math.max(ATTACH.length, H2_PREFACE.length);
        if (!this.#attached && this.#buf.length > keep) this.#buf = this.#buf.subarray(this.#buf.length - keep);
        if (this.#attached && this.#buf.length >= H2_PREFACE.length && !H2_PREFACE.startsWith(this.#buf.subarray(0, H2_PREFACE.length).toString('latin1'))) {
          // Neither a preface nor an ATTACH: garbage after an answer; wait for the next ATTACH.
          this.#attached = false;
          continue;
        }
        return { kind: 'wait', answers };
      }
      const nl = this.#buf.indexOf('\n', at, 'latin1');
      if (nl < 0) {
        this.#buf = this.#buf.subarray(at);
        return { kind: 'wait', answers };
      }
      const nonce = this.#buf.subarray(at + ATTACH.length, nl).toString('latin1');
      this.#buf = this.#buf.subarray(nl + 1);
      if (/^[0-9a-f]{16}$/.test(nonce)) {
        answers.push(nonce);
        this.#attached = true;
      }
    }
  }
}

/**
 * The host's side: finds the guest's answer to its latest nonce in what it reads, and the bytes after
 * it (the first of HTTP/2).
 */
export class HostHandshake {
  #buf: Buffer = Buffer.alloc(0);
  nonce = newNonce();

  /** The line to send; every call makes a new nonce, and only the answer to it counts. */
  attachLine(): string {
    this.nonce = newNonce();
    return `${ATTACH}${this.nonce}\n`;
  }

  /** Takes bytes read from the socket; returns the bytes after the answer once it came, else undefined. */
  push(chunk: Buffer): Buffer | undefined {
    this.#buf = this.#buf.length === 0 ? chunk : Buffer.concat([this.#buf, chunk]);
    const want = `${ATTACHED}${this.nonce}\n`;
    const at = this.#buf.indexOf(want, 0, 'latin1');
    if (at < 0) {
      if (this.#buf.length > want.length) this.#buf = this.#buf.subarray(this.#buf.length - want.length);
      return undefined;
    }
    return this.#buf.subarray(at + want.length);
  }
}
