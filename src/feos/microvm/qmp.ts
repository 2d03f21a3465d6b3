/**
 * A QMP client (QEMU Machine Protocol, https://www.qemu.org/docs/master/interop/qmp-spec.html): JSON
 * lines over the microVM's `qmp.sock`. One connection per microVM, held while it runs; its events
 * (SHUTDOWN, STOP, RESUME, ...) tell a guest's own power-off from a crash.
 */
import { EventEmitter } from 'node:events';
import net from 'node:net';

/** A QMP event as QEMU sends it. */
export interface QmpEvent {
  event: string;
  data?: Record<string, unknown>;
  timestamp?: { seconds: number; microseconds: number };
}

/** An error answer of QMP: `class` and `desc`. */
export class QmpError extends Error {
  readonly qmpClass: string;
  constructor(cmd: string, qmpClass: string, desc: string) {
    super(`QMP ${cmd}: ${qmpClass}: ${desc}`);
    this.name = 'QmpError';
    this.qmpClass = qmpClass;
  }
}

/**
 * One QMP connection. Emits `event` (QmpEvent) and `close` once.
 */
export class QmpClient extends EventEmitter<{ event: [QmpEvent]; close: [] }> {
  readonly #sock: net.Socket;
  #buf = '';
  #nextId = 1;
  readonly #pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void; cmd: string }>();
  #closed = false;

  private constructor(sock: net.Socket) {
    super();
    this.#sock = sock;
  }

  /** Whether the connection is closed. */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Connects, reads the greeting and enters command mode.
   * @throws Error naming the socket when it cannot connect or QEMU does not greet within `timeoutMs`
   */
  static connect(path: string, timeoutMs = 5000): Promise<QmpClient> {
    return new Promise((resolve, reject) => {
      const sock = net.connect(path);
      const client = new QmpClient(sock);
      let greeted = false;
      const timer = setTimeout(() => {
        sock.destroy();
        reject(new Error(`QMP ${path}: no greeting within ${timeoutMs} ms`));
      }, timeoutMs);
      sock.setEncoding('utf8');
      sock.on('error', (err) => {
        clearTimeout(timer);
        if (!greeted) reject(new Error(`QMP ${path}: ${err.message}`, { cause: err }));
      });
      sock.on('close', () => client.#onClose());
      sock.on('data', (data: string) => {
        client.#buf += data;
        let nl = client.#buf.indexOf('\n');
        while (nl >= 0) {
          const line = client.#buf.slice(0, nl).trim();
          client.#buf = client.#buf.slice(nl + 1);
          nl = client.#buf.indexOf('\n');
          if (!line) continue;
          let msg: Record<string, unknown>;
          try {
            msg = JSON.parse(line);
          } catch {
            continue;
          }
          if (!greeted && 'QMP' in msg) {
            greeted = true;
            client.execute('qmp_capabilities').then(
              () => {
                clearTimeout(timer);
                resolve(client);
              },
              (err: Error) => {
                clearTimeout(timer);
                sock.destroy();
                reject(err);
              },
            );
            continue;
          }
          client.#onMessage(msg);
        }
      });
    });
  }

  #onMessage(msg: Record<string, unknown>): void {
    if (typeof msg.event === 'string') {
      this.emit('event', msg as unknown as QmpEvent);
      return;
    }
    const id = msg.id as number | undefined;
    if (id === undefined) return;
    const p = this.#pending.get(id);
    if (!p) return;
    this.#pending.delete(id);
    if ('error' in msg) {
      const e = msg.error as { class?: string; desc?: string };
      p.reject(new QmpError(p.cmd, e.class ?? 'GenericError', e.desc ?? ''));
    } else p.resolve(msg.return);
  }

  #onClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const p of this.#pending.values()) p.reject(new Error(`QMP ${p.cmd}: the connection closed`));
    this.#pending.clear();
    this.emit('close');
  }

  /**
   * Runs a command.
   * @returns its `return` value
   * @throws QmpError for QEMU's error answer; Error when the connection closes first or after `timeoutMs`
   */
  execute<T = unknown>(cmd: string, args?: Record<string, unknown>, timeoutMs = 10_000): Promise<T> {
    if (this.#closed) return Promise.reject(new Error(`QMP ${cmd}: the connection is closed`));
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new Error(`QMP ${cmd}: no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#pending.set(id, {
        cmd,
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v as T);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.#sock.write(`${JSON.stringify(args ? { execute: cmd, arguments: args, id } : { execute: cmd, id })}\n`);
    });
  }

  /** Closes the connection. */
  close(): void {
    this.#sock.destroy();
  }
}
