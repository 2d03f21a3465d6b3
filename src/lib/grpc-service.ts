/**
 * grpc-js's service definition of a protobuf-es service descriptor: the method paths
 * `/<package>.<Service>/<Method>`, serialization with toBinary and deserialization with fromBinary. One
 * piece for every gRPC server and client of the project (feosd's API, the control plane's port for nodes).
 */
import type * as grpc from '@grpc/grpc-js';
import { fromBinary, toBinary, type DescMessage, type DescService, type MessageShape } from '@bufbuild/protobuf';

/** grpc-js's service definition of a protobuf-es service (its streaming methods as such). */
export function serviceDefinition(service: DescService): grpc.ServiceDefinition {
  const def: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
  for (const m of service.methods) {
    def[m.localName] = {
      path: `/${service.typeName}/${m.name}`,
      requestStream: m.methodKind === 'client_streaming' || m.methodKind === 'bidi_streaming',
      responseStream: m.methodKind === 'server_streaming' || m.methodKind === 'bidi_streaming',
      requestSerialize: (msg: MessageShape<DescMessage>) => Buffer.from(toBinary(m.input, msg)),
      requestDeserialize: (buf: Buffer) => fromBinary(m.input, buf),
      responseSerialize: (msg: MessageShape<DescMessage>) => Buffer.from(toBinary(m.output, msg)),
      responseDeserialize: (buf: Buffer) => fromBinary(m.output, buf),
      originalName: m.name,
    } as grpc.MethodDefinition<unknown, unknown>;
  }
  return def as grpc.ServiceDefinition;
}
