/**
 * The adapter between protobuf-es service descriptors and @grpc/grpc-js: the service definitions
 * (src/lib's `serviceDefinition`, shared with the control plane's port for nodes), handlers as async
 * functions whose thrown errors go through `toGrpcStatus`, and typed promise clients.
 */
import * as grpc from '@grpc/grpc-js';
import { create, type DescMessage, type DescMethod, type MessageInitShape, type MessageShape } from '@bufbuild/protobuf';
import type { GenService, GenServiceMethods } from '@bufbuild/protobuf/codegenv2';
import { serviceDefinition } from '../../lib/index.ts';
import { toGrpcStatus } from './errors.ts';

export { serviceDefinition };


type In<M> = M extends { input: infer I extends DescMessage } ? MessageShape<I> : never;
type Out<M> = M extends { output: infer O extends DescMessage } ? MessageShape<O> : never;
type OutInit<M> = M extends { output: infer O extends DescMessage } ? MessageInitShape<O> : never;

/**
 * Handlers of a service: unary (and client-streaming: the requests as an async iterable) return the
 * answer; server-streaming ones write to `send`; bidirectional ones read the requests as an async
 * iterable and write to `send`.
 */
export type ServiceHandlers<T extends GenServiceMethods> = {
  [K in keyof T]: T[K]['methodKind'] extends 'bidi_streaming'
    ? (reqs: AsyncIterable<In<T[K]>>, send: (msg: OutInit<T[K]>) => boolean, call: grpc.ServerDuplexStream<In<T[K]>, Out<T[K]>>) => Promise<void>
    : T[K]['methodKind'] extends 'server_streaming'
    ? (req: In<T[K]>, send: (msg: OutInit<T[K]>) => boolean, call: grpc.ServerWritableStream<In<T[K]>, Out<T[K]>>) => Promise<void>
    : T[K]['methodKind'] extends 'client_streaming'
      ? (reqs: AsyncIterable<In<T[K]>>, call: grpc.ServerReadableStream<In<T[K]>, Out<T[K]>>) => Promise<OutInit<T[K]>>
      : (req: In<T[K]>, call: grpc.ServerUnaryCall<In<T[K]>, Out<T[K]>>) => Promise<OutInit<T[K]>>;
};

/**
 * Adds a service to a grpc-js server with async handlers.
 * @param onError sees every failed call (for the log), after its status is decided
 */
export function addService<T extends GenServiceMethods>(
  server: grpc.Server,
  service: GenService<T>,
  handlers: ServiceHandlers<T>,
  onError?: (method: string, err: unknown) => void,
): void {
  const impl: grpc.UntypedServiceImplementation = {};
  for (const m of service.methods as DescMethod[]) {
    const h = (handlers as Record<string, (...a: unknown[]) => Promise<unknown>>)[m.localName];
    const fail = (err: unknown) => {
      onError?.(m.name, err);
      return toGrpcStatus(err);
    };
    if (m.methodKind === 'unary') {
      impl[m.localName] = (call: grpc.ServerUnaryCall<unknown, unknown>, cb: grpc.sendUnaryData<unknown>) => {
        h(call.request, call).then(
          (res) => cb(null, create(m.output, res as never)),
          (err: unknown) => cb(fail(err) as grpc.ServiceError),
        );
      };
    } else if (m.methodKind === 'server_streaming') {
      impl[m.localName] = (call: grpc.ServerWritableStream<unknown, unknown>) => {
        const send = (msg: unknown) => call.write(create(m.output, msg as never));
        // Like a duplex, a server stream takes its status from an 'error' event (grpc-js then ends it with
        // that status); destroy() would end it without any, and the client would wait forever.
        h(call.request, send, call).then(
          () => call.end(),
          (err: unknown) => call.emit('error', Object.assign(new Error(), fail(err))),
        );
      };
    } else if (m.methodKind === 'bidi_streaming') {
      impl[m.localName] = (call: grpc.ServerDuplexStream<unknown, unknown>) => {
        const send = (msg: unknown) => call.write(create(m.output, msg as never));
        // A duplex takes its status from an 'error' event (it then ends itself with it); destroy() would
        // end it without one.
        h(call, send, call).then(
          () => call.end(),
          (err: unknown) => call.emit('error', Object.assign(new Error(), fail(err))),
        );
      };
    } else if (m.methodKind === 'client_streaming') {
      impl[m.localName] = (call: grpc.ServerReadableStream<unknown, unknown>, cb: grpc.sendUnaryData<unknown>) => {
        h(call, call).then(
          (res) => cb(null, create(m.output, res as never)),
          (err: unknown) => cb(fail(err) as grpc.ServiceError),
        );
      };
    }
  }
  server.addService(serviceDefinition(service), impl);
}

/**
 * A promise client of a protobuf-es service: unary methods return promises; server streams return the
 * grpc-js stream; bidirectional streams the grpc-js duplex (write request messages, read responses).
 */
export type Client<T extends GenServiceMethods> = {
  [K in keyof T]: T[K]['methodKind'] extends 'bidi_streaming'
    ? (options?: grpc.CallOptions) => grpc.ClientDuplexStream<In<T[K]>, Out<T[K]>>
    : T[K]['methodKind'] extends 'server_streaming'
    ? (req: MessageInitShape<T[K]['input']>, options?: grpc.CallOptions) => grpc.ClientReadableStream<Out<T[K]>>
    : T[K]['methodKind'] extends 'client_streaming'
      ? (reqs: MessageInitShape<T[K]['input']>[], options?: grpc.CallOptions) => Promise<Out<T[K]>>
      : (req: MessageInitShape<T[K]['input']>, options?: grpc.CallOptions) => Promise<Out<T[K]>>;
} & { readonly grpc: grpc.Client };

/**
 * Makes a client of a service.
 * @param target a grpc-js target: `unix:/run/feos/api.sock`, `127.0.0.1:1337`, `[::1]:1337`
 */
export function makeClient<T extends GenServiceMethods>(service: GenService<T>, target: string, channel?: grpc.Client): Client<T> {
  const Ctor = grpc.makeGenericClientConstructor(serviceDefinition(service), service.typeName);
  const raw = channel
    ? new Ctor(target, grpc.credentials.createInsecure(), { channelOverride: channel.getChannel() })
    : new Ctor(target, grpc.credentials.createInsecure());
  const out: Record<string, unknown> = { grpc: raw };
  for (const m of service.methods as DescMethod[]) {
    const fn = (raw as unknown as Record<string, (...a: unknown[]) => unknown>)[m.localName].bind(raw);
    if (m.methodKind === 'unary') {
      out[m.localName] = (req: unknown, options: grpc.CallOptions = {}) =>
        new Promise((resolve, reject) => {
          fn(create(m.input, req as never), new grpc.Metadata(), options, (err: unknown, res: unknown) => (err ? reject(err) : resolve(res)));
        });
    } else if (m.methodKind === 'server_streaming') {
      out[m.localName] = (req: unknown, options: grpc.CallOptions = {}) => fn(create(m.input, req as never), new grpc.Metadata(), options);
    } else if (m.methodKind === 'bidi_streaming') {
      out[m.localName] = (options: grpc.CallOptions = {}) => fn(new grpc.Metadata(), options);
    } else if (m.methodKind === 'client_streaming') {
      out[m.localName] = (reqs: unknown[], options: grpc.CallOptions = {}) =>
        new Promise((resolve, reject) => {
          const stream = fn(new grpc.Metadata(), options, (err: unknown, res: unknown) => (err ? reject(err) : resolve(res))) as grpc.ClientWritableStream<unknown>;
          for (const r of reqs) stream.write(create(m.input, r as never));
          stream.end();
        });
    }
  }
  return out as Client<T>;
}
